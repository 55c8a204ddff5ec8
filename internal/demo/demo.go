// Package demo writes a small but realistic pugmark bucket through the
// layout package alone: what `pugfs demo` and `make run` mount, and what
// tests and benchmarks use as a bucket that exercises every feature of the
// layout (history of every snapshot type, nested names, tombstones, a
// rename, gzip and zstd bodies, inline and large bodies, a materialised and
// a pending fork, named sessions, a plain ref, nested memory namespaces
// with history, a delivered cross-session write).
//
// The content is fixed: two runs write byte-identical blobs; only session
// IDs, transaction IDs and timestamps differ (and the memory files and
// snapshots that contain them).
package demo

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"strings"

	"github.com/klauspost/compress/zstd"

	"github.com/pugmark/pugfs/layout"
)

// Names of what Write creates, for tests and documentation.
const (
	// MainName is the named session with the longest history.
	MainName = "demo"
	// InboxName is the named session that receives a cross-session write.
	InboxName = "inbox"
	// PlainRef is a ref outside refs/sessions/; it points at the fork
	// child's manifest.
	PlainRef = "latest-fork"
	// BigFile is the name of the large (200 KiB) file in the main session.
	BigFile = "logs/build.log"
	// BigSize is its size.
	BigSize = 200 << 10
)

// Session describes one session Write created or extended.
type Session struct {
	ID   layout.SessionID
	Role string // what the session shows, for the summary
	Name string // its name (refs/sessions/<name>), if any
	// Versions is its latest version; 0 for a pending fork child, which
	// does not exist yet.
	Versions uint32
}

// Summary says what Write wrote.
type Summary struct {
	Main, Fork, PendingFork, Inbox Session
	// Namespaces are the memory namespaces with their latest versions.
	Namespaces []layout.Namespace
	// Refs are the ref names written (both session refs and PlainRef).
	Refs []string
	// Blobs is the number of distinct blobs referenced.
	Blobs int
}

// Sessions returns the sessions in the order they are described.
func (s Summary) Sessions() []Session {
	return []Session{s.Main, s.Fork, s.PendingFork, s.Inbox}
}

// String is the summary `pugfs demo` prints.
func (s Summary) String() string {
	var b strings.Builder
	for _, se := range s.Sessions() {
		name := ""
		if se.Name != "" {
			name = fmt.Sprintf(" (refs/sessions/%s)", se.Name)
		}
		fmt.Fprintf(&b, "  session %s  %-12s %s%s\n", se.ID, versions(se.Versions), se.Role, name)
	}
	var nss []string
	for _, ns := range s.Namespaces {
		nss = append(nss, fmt.Sprintf("%s (%s)", ns.Name, versions(ns.Version)))
	}
	fmt.Fprintf(&b, "  memories: %s\n", strings.Join(nss, ", "))
	fmt.Fprintf(&b, "  refs: %s\n", strings.Join(s.Refs, ", "))
	fmt.Fprintf(&b, "  blobs: %d distinct\n", s.Blobs)
	return b.String()
}

func versions(n uint32) string {
	switch n {
	case 0:
		return "no versions"
	case 1:
		return "1 version"
	}
	return fmt.Sprintf("%d versions", n)
}

// writer carries the state of one Write.
type writer struct {
	s     *layout.Store
	blobs map[layout.Digest]bool
}

// file is one body to store, with its descriptor fields.
type file struct {
	name, contentType, encoding string
	body                        []byte // the decoded content
	meta                        map[string]string
	schema                      string
}

// put stores f's body (encoded per f.encoding) and returns its descriptor,
// inline data set exactly when the stored body is at most 1024 bytes
// (decisions.md).
func (w *writer) put(ctx context.Context, f file) (layout.Descriptor, error) {
	stored := f.body
	switch f.encoding {
	case layout.EncodingGzip:
		var buf bytes.Buffer
		// A zero gzip header (no name, no mtime) keeps the bytes, and so
		// the digest, the same on every run.
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		zw.Write(f.body)
		zw.Close()
		stored = buf.Bytes()
	case layout.EncodingZstd:
		enc, _ := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
		stored = enc.EncodeAll(f.body, nil)
		enc.Close()
	}
	d, err := w.s.PutBody(ctx, f.name, stored, layout.BlobOptions{ContentType: f.contentType, ContentEncoding: f.encoding})
	if err != nil {
		return layout.Descriptor{}, fmt.Errorf("demo: store %s: %w", f.name, err)
	}
	w.blobs[d.Digest] = true
	d.SchemaURL, d.Metadata = f.schema, f.meta
	return d, nil
}

func (w *writer) putAll(ctx context.Context, fs ...file) ([]layout.Descriptor, error) {
	out := make([]layout.Descriptor, 0, len(fs))
	for _, f := range fs {
		d, err := w.put(ctx, f)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

func (w *writer) commit(ctx context.Context, id layout.SessionID, t layout.SnapshotType, ds ...layout.Descriptor) (layout.CommitResult, error) {
	res, err := w.s.Commit(ctx, id, layout.CommitRequest{Type: t, Descriptors: ds})
	if err != nil {
		return res, fmt.Errorf("demo: commit %s to %s: %w", t, id, err)
	}
	return res, nil
}

func tombstone(name string) layout.Descriptor {
	return layout.Descriptor{Name: name, Deleted: true}
}

func text(name, body string) file {
	return file{name: name, contentType: contentType(name), body: []byte(body)}
}

func contentType(name string) string {
	switch {
	case strings.HasSuffix(name, ".go"):
		return "text/x-go; charset=utf-8"
	case strings.HasSuffix(name, ".md"):
		return "text/markdown; charset=utf-8"
	case strings.HasSuffix(name, ".json"):
		return "application/json"
	case strings.HasSuffix(name, ".jsonl"):
		return "application/x-ndjson"
	case strings.HasSuffix(name, ".csv"):
		return "text/csv; charset=utf-8"
	}
	return "text/plain; charset=utf-8"
}

// Write writes the demo content into the bucket behind s. On a bucket
// that already holds a demo, the named sessions are reused (they gain
// versions) and new fork and pending-fork children are added, so running
// it twice is harmless.
func Write(ctx context.Context, s *layout.Store) (Summary, error) {
	w := &writer{s: s, blobs: map[layout.Digest]bool{}}
	var sum Summary

	// The session that receives a cross-session write later. It is named
	// too, so the tree's names/ has more than one entry.
	inboxM := s.NewRootManifest()
	inboxM.Agent, inboxM.Handler = "triage-bot", "inbox"
	inbox, _, err := s.CreateNamedSession(ctx, InboxName, inboxM)
	if err != nil {
		return sum, fmt.Errorf("demo: create session %s: %w", InboxName, err)
	}
	ds, err := w.putAll(ctx, text("README.md", inboxReadme))
	if err != nil {
		return sum, err
	}
	if _, err := w.commit(ctx, inbox.Session, layout.Checkpoint, ds...); err != nil {
		return sum, err
	}

	mainM := s.NewRootManifest()
	mainM.Agent, mainM.Handler = "coder", "pugmark-coder"
	mainM.Metadata = map[string]string{"project": "pugfs-demo"}
	main, _, err := s.CreateNamedSession(ctx, MainName, mainM)
	if err != nil {
		return sum, fmt.Errorf("demo: create session %s: %w", MainName, err)
	}
	id := main.Session

	// v1, checkpoint: the initial tree.
	ds, err = w.putAll(ctx,
		text("README.md", mainReadme),
		text("src/main.go", mainGoV1),
		text("src/util/strings.go", stringsGo),
		text("notes/today.md", todayV1),
		text("notes/draft.md", draft),
		text("scratch.txt", "temporary: delete me\n"),
		file{name: "config.json", contentType: "application/json", body: []byte(configJSON),
			schema: "https://pugmark.dev/schemas/demo-config.json", meta: map[string]string{"author": "alice", "reviewed": "yes"}},
	)
	if err != nil {
		return sum, err
	}
	if _, err := w.commit(ctx, id, layout.Checkpoint, ds...); err != nil {
		return sum, err
	}

	// v2, provisional (someone else appending input): an edit, a large
	// file, and two encoded bodies.
	ds, err = w.putAll(ctx,
		text("notes/today.md", todayV2),
		text(BigFile, bigLog()),
		file{name: "data/report.csv", contentType: "text/csv; charset=utf-8", encoding: layout.EncodingGzip, body: []byte(reportCSV())},
		file{name: "data/events.jsonl", contentType: "application/x-ndjson", encoding: layout.EncodingZstd, body: []byte(eventsJSONL())},
	)
	if err != nil {
		return sum, err
	}
	if _, err := w.commit(ctx, id, layout.Provisional, ds...); err != nil {
		return sum, err
	}

	// v3, checkpoint: a deletion, a rename (tombstone + the same blob
	// under the new name, no re-upload), and a new version of main.go.
	draftD, err := w.put(ctx, text("notes/plan.md", draft))
	if err != nil {
		return sum, err
	}
	mainV2, err := w.put(ctx, text("src/main.go", mainGoV2))
	if err != nil {
		return sum, err
	}
	if _, err := w.commit(ctx, id, layout.Checkpoint,
		tombstone("scratch.txt"), tombstone("notes/draft.md"), draftD, mainV2); err != nil {
		return sum, err
	}

	// v4, queueing: input queued for the handler's next run.
	ds, err = w.putAll(ctx, text("queue/next-task.md", nextTask))
	if err != nil {
		return sum, err
	}
	if _, err := w.commit(ctx, id, layout.Queueing, ds...); err != nil {
		return sum, err
	}

	// v5: a fork, recorded and materialised (§11); the child then works
	// on its own.
	forkD, err := w.put(ctx, text("notes/experiment.md", experiment))
	if err != nil {
		return sum, err
	}
	child, err := s.Fork(ctx, id, layout.ForkRequest{Descriptor: forkD})
	if err != nil {
		return sum, fmt.Errorf("demo: fork: %w", err)
	}
	ds, err = w.putAll(ctx, text("src/main.go", mainGoFork), text("notes/today.md", todayFork))
	if err != nil {
		return sum, err
	}
	if _, err := w.commit(ctx, child, layout.Checkpoint, ds...); err != nil {
		return sum, err
	}

	// v6: a cross-session write to the inbox, with a local note, then its
	// delivery (§12.2) as a provisional snapshot of the inbox.
	msg, err := w.put(ctx, text("messages/from-demo.md", message))
	if err != nil {
		return sum, err
	}
	msg.TargetSession = inbox.Session
	sent, err := w.put(ctx, text("notes/sent.md", "Asked the inbox to review the build log.\n"))
	if err != nil {
		return sum, err
	}
	res, err := w.commit(ctx, id, layout.Checkpoint, msg, sent)
	if err != nil {
		return sum, err
	}
	if _, err := s.DeliverCrossSession(ctx, id, res.Version, res.Descriptors); err != nil {
		return sum, fmt.Errorf("demo: deliver: %w", err)
	}

	// v7: a second fork, recorded only (phase 1): the child does not
	// exist until the parent's next invocation materialises it.
	pendD, err := w.put(ctx, text("notes/next-experiment.md", nextExperiment))
	if err != nil {
		return sum, err
	}
	pending, pres, err := s.RecordFork(ctx, id, layout.ForkRequest{Descriptor: pendD})
	if err != nil {
		return sum, fmt.Errorf("demo: record fork: %w", err)
	}

	childKey, _ := layout.ManifestKey(child)
	if err := s.Link(ctx, PlainRef, childKey); err != nil {
		return sum, fmt.Errorf("demo: link %s: %w", PlainRef, err)
	}

	if err := w.memories(ctx, id, pres.Version); err != nil {
		return sum, err
	}

	latest := func(id layout.SessionID) uint32 {
		v, _ := s.LatestVersion(ctx, id)
		return v
	}
	sum.Main = Session{ID: id, Role: "main: every snapshot type, tombstone, rename, gzip/zstd, 200 KiB file", Name: MainName, Versions: latest(id)}
	sum.Fork = Session{ID: child, Role: "fork of demo (materialised), with its own edits", Versions: latest(child)}
	sum.PendingFork = Session{ID: pending, Role: fmt.Sprintf("pending fork of demo@%d (recorded, not materialised)", pres.Version)}
	sum.Inbox = Session{ID: inbox.Session, Role: fmt.Sprintf("inbox: received a cross-session write from demo@%d", res.Version), Name: InboxName, Versions: latest(inbox.Session)}
	if sum.Namespaces, err = s.ListNamespaces(ctx, nil); err != nil {
		return sum, fmt.Errorf("demo: list namespaces: %w", err)
	}
	sum.Refs = []string{layout.SessionRefName(MainName), layout.SessionRefName(InboxName), PlainRef}
	sum.Blobs = len(w.blobs)
	return sum, nil
}

// memories writes three namespaces, two of them nested, with history:
// records replaced, added and removed (§8.3).
func (w *writer) memories(ctx context.Context, writer layout.SessionID, version uint32) error {
	commit := layout.MemoryCommit{Session: writer, Version: version}
	steps := []struct {
		ns     string
		put    []file
		remove []string
	}{
		{ns: "team/notes", put: []file{text("conventions.md", conventionsV1)}},
		{ns: "team/notes", put: []file{text("standup.md", standup)}},
		{ns: "team/notes", put: []file{text("conventions.md", conventionsV2)}},
		{ns: "user/alice", put: []file{text("preferences.json", `{"editor": "vim", "theme": "dark"}`+"\n"), text("todo.md", "- review the fork\n")}},
		{ns: "user/alice", put: []file{text("preferences.json", `{"editor": "vim", "theme": "light"}`+"\n")}},
		{ns: "user/alice", remove: []string{"todo.md"}},
		{ns: "project", put: []file{text("glossary.md", glossary)}},
	}
	for _, st := range steps {
		ds, err := w.putAll(ctx, st.put...)
		if err != nil {
			return err
		}
		if _, err := w.s.WriteMemory(ctx, st.ns, layout.MemoryWrite{Put: ds, Remove: st.remove, Commit: commit}); err != nil {
			return fmt.Errorf("demo: memory %s: %w", st.ns, err)
		}
	}
	return nil
}
