package main

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"github.com/pugmark/pugfs/internal/s3test"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/pugmark/pugfs/layout"
	_ "github.com/pugmark/pugfs/layout/drivers" // SHA-256 and If-Match hooks, URL schemes
	"github.com/pugmark/pugfs/layout/localblob"
)

// genVersion is stored with every generated data set; changing what a
// data set holds means bumping it, so stale caches are regenerated.
const genVersion = "pugfs-bench data v1"

// The kinds of data set.
const (
	kindBlob     = "blob"     // one session holding one large file
	kindSmall    = "small"    // one session holding many 1-4 KiB text files
	kindSessions = "sessions" // many sessions of one small file each
	kindVersions = "versions" // one session with many versions
)

// needle is the word grep looks for: it is in one file of every hundred.
const needle = "pugfsneedle"

// genPar is how many requests generation keeps in flight.
const genPar = 16

// dataset is one generated data set: a pugmark bucket in a local
// directory, the same files as a plain tree (for the native disk and the
// other FUSE filesystems), and optionally a copy on the S3 server.
type dataset struct {
	Kind string
	Name string // kind-size, also the S3 bucket name
	N    int    // files, sessions or versions
	Size int64  // blob size
	Dir  string
	// Session is the session holding the files (blob, small, versions).
	Session layout.SessionID
	// Hours is how many hour partitions a kindHourSessions set spans.
	Hours int
}

func newDataset(base, kind string, n int, size int64) *dataset {
	d := &dataset{Kind: kind, N: n, Size: size}
	if kind == kindBlob {
		d.Name = fmt.Sprintf("%s-%d", kind, size)
	} else {
		d.Name = fmt.Sprintf("%s-%d", kind, n)
	}
	d.Dir = filepath.Join(base, d.Name)
	d.Session = benchID(d.Name, -1)
	return d
}

func (d *dataset) bucketDir() string { return filepath.Join(d.Dir, "bucket") }

// plainDir mirrors the mounted tree: plain/sessions/<id>/<name>.
func (d *dataset) plainDir() string { return filepath.Join(d.Dir, "plain") }

func (d *dataset) sessionPath() string { return "sessions/" + d.Session.String() }

// benchID is a deterministic session ID, so that the local bucket, the S3
// copy and the plain tree agree across runs: a fixed hour, then bytes of a
// hash of the data set and index (the layout wants only the hour prefix).
func benchID(name string, i int) layout.SessionID {
	var id layout.SessionID
	hour := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Unix() / 3600
	binary.BigEndian.PutUint32(id[:4], uint32(hour))
	sum := sha256.Sum256(fmt.Appendf(nil, "pugfs-bench/%s/%d", name, i))
	copy(id[4:], sum[:12])
	return id
}

func seedOf(s string) [32]byte { return sha256.Sum256([]byte("pugfs-bench seed/" + s)) }

// smallName is the name of small file i: 100 files per directory.
func smallName(i int) string { return fmt.Sprintf("d%03d/f%05d.txt", i/100, i) }

var words = strings.Fields(`alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima
mike november oscar papa quebec romeo sierra tango uniform victor whiskey xray yankee zulu
session snapshot version digest manifest bucket object memory commit writer reader cache
agent handler fork parent child slot name value token stream chunk window latency buffer`)

// smallBody is file i's content: text of 1024 to 4096 bytes; one file in
// a hundred has the needle in it.
func smallBody(i int) []byte {
	r := rand.New(rand.NewPCG(uint64(i), 0x5eed))
	size := 1024 + r.IntN(4096-1024+1)
	var b strings.Builder
	b.Grow(size + 16)
	for n := 0; b.Len() < size; n++ {
		if i%100 == 7 && n == 40 {
			b.WriteString(needle)
		} else {
			b.WriteString(words[r.IntN(len(words))])
		}
		if n%12 == 11 {
			b.WriteByte('\n')
		} else {
			b.WriteByte(' ')
		}
	}
	return []byte(b.String()[:size])
}

// ensureLocal generates d (bucket and plain tree) unless a complete copy
// of this generator's version is cached.
func ensureLocal(ctx context.Context, d *dataset, logf func(string, ...any)) error {
	marker := filepath.Join(d.Dir, "complete")
	if b, err := os.ReadFile(marker); err == nil && string(b) == genVersion {
		return nil
	}
	logf("generating data set %s in %s", d.Name, d.Dir)
	t0 := time.Now()
	if err := os.RemoveAll(d.Dir); err != nil {
		return err
	}
	b, err := localblob.OpenBucket(d.bucketDir(), &localblob.Options{CreateDir: true})
	if err != nil {
		return err
	}
	defer b.Close()
	if err := fill(ctx, layout.New(b, nil), d, true); err != nil {
		return fmt.Errorf("generate %s: %w", d.Name, err)
	}
	logf("  %s generated in %.1fs", d.Name, time.Since(t0).Seconds())
	return os.WriteFile(marker, []byte(genVersion), 0o644)
}

// ensureS3 copies d onto the S3 server (same IDs and contents, written
// through the layout package with the S3 driver) unless done before. The
// local data set must exist (the blob is uploaded from its plain file).
func ensureS3(ctx context.Context, srv *s3test.Server, d *dataset, markerDir string, logf func(string, ...any)) error {
	marker := filepath.Join(markerDir, "s3-"+d.Name+".complete")
	if b, err := os.ReadFile(marker); err == nil && string(b) == genVersion {
		return nil
	}
	logf("generating data set %s on versitygw", d.Name)
	t0 := time.Now()
	if err := recreateS3Bucket(ctx, srv, d.Name); err != nil {
		return err
	}
	b, err := openS3Bucket(ctx, srv, d.Name)
	if err != nil {
		return err
	}
	defer b.Close()
	if err := fill(ctx, layout.New(b, nil), d, false); err != nil {
		return fmt.Errorf("generate %s on S3: %w", d.Name, err)
	}
	logf("  %s on S3 generated in %.1fs", d.Name, time.Since(t0).Seconds())
	return os.WriteFile(marker, []byte(genVersion), 0o644)
}

// fill writes d into store, and the plain tree when plain is set.
func fill(ctx context.Context, store *layout.Store, d *dataset, plain bool) error {
	switch d.Kind {
	case kindBlob:
		return fillBlob(ctx, store, d, plain)
	case kindSmall:
		return fillSmall(ctx, store, d, plain)
	case kindSessions:
		return fillSessions(ctx, store, d, plain)
	case kindVersions:
		return fillVersions(ctx, store, d)
	case kindHourSessions:
		return fillHourSessions(ctx, store, d, plain)
	case kindManySessions:
		return fillManySessions(ctx, store, d)
	}
	return fmt.Errorf("unknown data set kind %q", d.Kind)
}

func createSession(ctx context.Context, store *layout.Store, id layout.SessionID) (layout.Position, error) {
	m, _, err := store.CreateSession(ctx, &layout.Manifest{Session: id, FirstSequenceNumber: 1})
	if err != nil {
		return layout.Position{}, err
	}
	return layout.Position{LastSeq: m.FirstSequenceNumber - 1}, nil
}

// commit appends ds at *pos (a chain of commits by the only writer, so no
// listing is needed) and advances *pos.
func commit(ctx context.Context, store *layout.Store, id layout.SessionID, pos *layout.Position, ds []layout.Descriptor) error {
	base := *pos
	res, err := store.Commit(ctx, id, layout.CommitRequest{Type: layout.Provisional, Descriptors: ds, Base: &base})
	if err != nil {
		return err
	}
	*pos = res.Position()
	return nil
}

func writePlain(root, id, name string, body []byte) error {
	p := filepath.Join(root, "sessions", id, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, body, 0o644)
}

func fillBlob(ctx context.Context, store *layout.Store, d *dataset, plain bool) error {
	p := filepath.Join(d.plainDir(), d.sessionPath(), "blob.bin")
	if plain {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		f, err := os.Create(p)
		if err != nil {
			return err
		}
		r := rand.NewChaCha8(seedOf(d.Name))
		_, err = io.CopyN(f, r, d.Size)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	dg, size, err := layout.HashFile(f)
	if err != nil {
		return err
	}
	if size != d.Size {
		return fmt.Errorf("%s has %d bytes, want %d", p, size, d.Size)
	}
	pos, err := createSession(ctx, store, d.Session)
	if err != nil {
		return err
	}
	const ctype = "application/octet-stream"
	if _, err := store.PutBlobFile(ctx, f, dg, size, layout.BlobOptions{ContentType: ctype}); err != nil {
		return err
	}
	return commit(ctx, store, d.Session, &pos, []layout.Descriptor{{
		Name: "blob.bin", Digest: dg, Size: size, CreatedAt: time.Now().UTC(), ContentType: ctype,
	}})
}

// parallel runs fn(0..n-1) with genPar in flight and returns the first
// error; after one, the remaining indexes are skipped.
func parallel(ctx context.Context, n int, fn func(ctx context.Context, i int) error) error {
	return parallelN(ctx, n, genPar, fn)
}

// parallelN is parallel with par in flight.
func parallelN(ctx context.Context, n, par int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
		next  = make(chan int)
	)
	for range min(par, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := fn(ctx, i); err != nil {
					once.Do(func() { first = err; cancel() })
				}
			}
		}()
	}
feed:
	for i := 0; i < n; i++ {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}

func fillSmall(ctx context.Context, store *layout.Store, d *dataset, plain bool) error {
	pos, err := createSession(ctx, store, d.Session)
	if err != nil {
		return err
	}
	ds := make([]layout.Descriptor, d.N)
	err = parallel(ctx, d.N, func(ctx context.Context, i int) error {
		body := smallBody(i)
		if plain {
			if err := writePlain(d.plainDir(), d.Session.String(), smallName(i), body); err != nil {
				return err
			}
		}
		var e error
		ds[i], e = store.PutBody(ctx, smallName(i), body, layout.BlobOptions{ContentType: "text/plain; charset=utf-8"})
		return e
	})
	if err != nil {
		return err
	}
	// A session written over time: snapshots of up to 1,000 files.
	for lo := 0; lo < len(ds); lo += 1000 {
		if err := commit(ctx, store, d.Session, &pos, ds[lo:min(lo+1000, len(ds))]); err != nil {
			return err
		}
	}
	return nil
}

func fillSessions(ctx context.Context, store *layout.Store, d *dataset, plain bool) error {
	return parallel(ctx, d.N, func(ctx context.Context, i int) error {
		id := benchID(d.Name, i)
		body := fmt.Appendf(nil, "session %d of %d\n", i, d.N)
		if plain {
			if err := writePlain(d.plainDir(), id.String(), "note.txt", body); err != nil {
				return err
			}
		}
		pos, err := createSession(ctx, store, id)
		if err != nil {
			return err
		}
		desc, err := store.PutBody(ctx, "note.txt", body, layout.BlobOptions{ContentType: "text/plain; charset=utf-8"})
		if err != nil {
			return err
		}
		return commit(ctx, store, id, &pos, []layout.Descriptor{desc})
	})
}

// versionBody is what version v writes; version v writes file v%100.
func versionBody(v int) []byte { return fmt.Appendf(nil, "written at version %d\n", v) }

func versionName(v int) string { return fmt.Sprintf("f%03d.txt", v%100) }

func fillVersions(ctx context.Context, store *layout.Store, d *dataset) error {
	pos, err := createSession(ctx, store, d.Session)
	if err != nil {
		return err
	}
	ds := make([]layout.Descriptor, d.N)
	err = parallel(ctx, d.N, func(ctx context.Context, i int) error {
		var e error
		ds[i], e = store.PutBody(ctx, versionName(i+1), versionBody(i+1), layout.BlobOptions{ContentType: "text/plain; charset=utf-8"})
		return e
	})
	if err != nil {
		return err
	}
	for i := range ds {
		if err := commit(ctx, store, d.Session, &pos, ds[i:i+1]); err != nil {
			return err
		}
	}
	if pos.Version != uint32(d.N) {
		return fmt.Errorf("session %s ended at version %d, want %d", d.Session, pos.Version, d.N)
	}
	return nil
}
