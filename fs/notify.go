package fs

import (
	"sync"

	"github.com/pugmark/pugfs/layout"
)

// notifier invalidates kernel dentries for names a commit changed. It runs
// in its own goroutine: a notification sent from inside a request handler
// can deadlock against the kernel (engineering.md).
type notifier struct {
	f    *FS
	ch   chan notice
	done chan struct{}
	once sync.Once
}

type notice struct {
	id    layout.SessionID
	names []string
}

func newNotifier(f *FS) *notifier {
	n := &notifier{f: f, ch: make(chan notice, 1024), done: make(chan struct{})}
	go n.run()
	return n
}

func (n *notifier) enqueue(id layout.SessionID, ds []layout.Descriptor) {
	names := make([]string, 0, len(ds))
	for _, d := range ds {
		names = append(names, d.Name)
	}
	select {
	case n.ch <- notice{id, names}:
	default:
		// The queue is full: entries expire by their TTL anyway.
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
		case nt := <-n.ch:
			n.send(nt)
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
