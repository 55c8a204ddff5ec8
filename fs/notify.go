package fs

import (
	"sync"

	"github.com/pugmark/pugfs/layout"
)

// notifier invalidates kernel dentries for names a commit changed, and
// drops the pages of files a commit rebased (slotFile.dropIfRebased). It
// runs in its own goroutine: a notification sent from inside a request
// handler can deadlock against the kernel (engineering.md).
type notifier struct {
	f *FS
	q noticeQueue
	// wake has a value while the queue may hold notices.
	wake chan struct{}
	done chan struct{}
	once sync.Once
}

type notice struct {
	id    layout.SessionID
	names []string
}

// noticeQueue holds the names commits changed, per session, until the
// notifier sends them: a name committed twice meanwhile is sent once.
// It never drops one. A queue of 1,024 notices dropped the rest when
// full (a burst of commits while the kernel was slow to take
// notifications), and a rebased file's pages then stayed until the
// metadata TTL (review 9). Its size is bounded by the names committed
// while the kernel takes one notification (a tar x into a directory a
// slow rename holds): each is a string already held by the commit, and
// a notification the kernel never takes would hold up more than this.
type noticeQueue struct {
	mu      sync.Mutex
	pending map[layout.SessionID]map[string]struct{} // GUARDED_BY(mu)
	order   []layout.SessionID                       // GUARDED_BY(mu): sessions in the order of their first notice
}

// add queues names of session id.
func (q *noticeQueue) add(id layout.SessionID, names []string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.pending == nil {
		q.pending = map[layout.SessionID]map[string]struct{}{}
	}
	set := q.pending[id]
	if set == nil {
		set = map[string]struct{}{}
		q.pending[id] = set
		q.order = append(q.order, id)
	}
	for _, name := range names {
		set[name] = struct{}{}
	}
}

// take returns what is queued, a notice per session, and empties the
// queue.
func (q *noticeQueue) take() []notice {
	q.mu.Lock()
	pending, order := q.pending, q.order
	q.pending, q.order = nil, nil
	q.mu.Unlock()
	out := make([]notice, 0, len(order))
	for _, id := range order {
		nt := notice{id: id}
		for name := range pending[id] {
			nt.names = append(nt.names, name)
		}
		out = append(out, nt)
	}
	return out
}

func newNotifier(f *FS) *notifier {
	n := &notifier{f: f, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go n.run()
	return n
}

func (n *notifier) enqueue(id layout.SessionID, ds []layout.Descriptor) {
	names := make([]string, 0, len(ds))
	for _, d := range ds {
		names = append(names, d.Name)
	}
	n.names(id, names)
}

// names queues names of session id whose entries the kernel must drop
// though no commit changed them (slotFile.writesThrough).
func (n *notifier) names(id layout.SessionID, names []string) {
	n.q.add(id, names)
	select {
	case n.wake <- struct{}{}:
	default: // already woken: the run takes these too
	}
}

func (n *notifier) close() {
	n.once.Do(func() { close(n.done) })
}

func (n *notifier) run() {
	for {
		select {
		case <-n.done:
			return
		case <-n.wake:
			for _, nt := range n.q.take() {
				n.send(nt)
			}
		}
	}
}

func (n *notifier) send(nt notice) {
	root := n.f.root
	if root == nil {
		return
	}
	sessions := root.GetChild("sessions")
	if sessions == nil {
		return
	}
	sess := sessions.GetChild(nt.id.String())
	if sess == nil {
		return
	}
	for _, name := range nt.names {
		parts, ok := layout.NamePath(name)
		if !ok {
			continue
		}
		dir := sess
		for _, p := range parts[:len(parts)-1] {
			if dir = dir.GetChild(p); dir == nil {
				break
			}
		}
		if dir == nil {
			continue
		}
		leaf := parts[len(parts)-1]
		if child := dir.GetChild(leaf); child != nil {
			if sf, ok := child.Operations().(*slotFile); ok {
				sf.dropIfRebased()
			}
		}
		dir.NotifyEntry(leaf)
	}
}
