package fs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/pugmark/pugfs/layout"
)

// <mnt>/.pugmark/failed/<session-id>/<name>.<time> shows what the mount
// kept of commits that failed for good (staging.Writer.salvageLocked), and
// failed/memories/<ns>%2F<name>.<time> and failed/refs/<name>.<time> the
// memory and ref writes that failed (staging.Records.keep), so that a
// user whose shell never saw close(2)'s error finds the data without
// reading logs (tree.md). The files are read-only; rm deletes them and
// rmdir an emptied session directory. They are the mount owner's: 0400
// files in 0700 directories, so on a shared mount (--allow-other) other
// users cannot read what someone else failed to commit.

// failedDir lists the failed directory on disk (sub "") or one session's
// directory in it.
type failedDir struct {
	f   *FS
	sub string
}

// open returns the failed directory beneath which names resolve: os.Root
// keeps a name from leaving it, whatever the name holds.
func (d *failedDir) open() (*os.Root, error) {
	r, err := os.OpenRoot(d.f.cfg.FailedDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil // nothing failed yet
	}
	return r, err
}

func (d *failedDir) list(ctx context.Context) ([]child, error) {
	root, err := d.open()
	if root == nil || err != nil {
		return nil, err
	}
	defer root.Close()
	dir := "."
	if d.sub != "" {
		dir = d.sub
	}
	f, err := root.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("failed commits: %w", err)
	}
	defer f.Close()
	ents, err := f.ReadDir(-1)
	if err != nil {
		return nil, fmt.Errorf("failed commits: %w", err)
	}
	var out []child
	for _, e := range ents {
		if c, ok := d.child(e.Name(), e.IsDir()); ok {
			out = append(out, c)
		}
	}
	return out, nil
}

func (d *failedDir) find(ctx context.Context, name string) (child, error) {
	if validLeaf(name) != 0 {
		return child{}, syscall.ENOENT
	}
	root, err := d.root()
	if err != nil {
		return child{}, err
	}
	defer root.Close()
	st, err := root.Lstat(filepath.Join(d.sub, name))
	if err != nil {
		// ENOENT for a missing name; anything else (EACCES, EIO of the
		// staging disk) is the caller's errnoOf's to map and log.
		return child{}, err
	}
	c, ok := d.child(name, st.IsDir())
	if !ok {
		return child{}, syscall.ENOENT
	}
	return c, nil
}

// child shows session directories at the top (and memories/ and refs/,
// for memory and ref writes that failed: staging.Records.keep) and
// regular files below; nothing else the directory may hold.
func (d *failedDir) child(name string, isDir bool) (child, bool) {
	f := d.f
	if d.sub == "" {
		if _, err := layout.ParseSessionID(name); (err != nil && name != "memories" && name != "refs") || !isDir {
			return child{}, false
		}
		return child{name: name, mode: syscall.S_IFDIR, ino: inoOf("failed", name), ttl: f.ttl, node: func() gofsNode {
			return &failedDirNode{dirNode: dirNode{f: f, ls: &failedDir{f: f, sub: name}}}
		}}, true
	}
	if isDir {
		return child{}, false
	}
	rel := filepath.Join(d.sub, name)
	return child{name: name, mode: syscall.S_IFREG, ino: inoOf("failed", d.sub, name), ttl: f.ttl, node: func() gofsNode {
		return &failedFileNode{fileNode: fileNode{f: f, c: &failedContent{d: d, rel: rel}}}
	}}, true
}

func (d *failedDir) dirAttr(ctx context.Context, out *fuse.Attr) error {
	out.Mode = syscall.S_IFDIR | 0o700
	return nil
}

// remove deletes a kept file or an empty session directory.
func (d *failedDir) remove(name string) error {
	if validLeaf(name) != 0 {
		return syscall.ENOENT
	}
	root, err := d.root()
	if err != nil {
		return err
	}
	defer root.Close()
	return root.Remove(filepath.Join(d.sub, name))
}

// failedDirNode is a directory of the failed tree: rm and rmdir work.
type failedDirNode struct{ dirNode }

var (
	_ = (gofs.NodeUnlinker)((*failedDirNode)(nil))
	_ = (gofs.NodeRmdirer)((*failedDirNode)(nil))
)

// Unlink deletes a kept file.
func (n *failedDirNode) Unlink(ctx context.Context, name string) syscall.Errno {
	if n.ls.(*failedDir).sub == "" {
		return syscall.EISDIR
	}
	return n.f.errnoOf("remove failed commit "+name, n.ls.(*failedDir).remove(name))
}

// Rmdir deletes an emptied session directory.
func (n *failedDirNode) Rmdir(ctx context.Context, name string) syscall.Errno {
	if n.ls.(*failedDir).sub != "" {
		return syscall.ENOTDIR
	}
	return n.f.errnoOf("remove failed commits of "+name, n.ls.(*failedDir).remove(name))
}

// failedFileNode is a kept file: read-only, the owner's alone.
type failedFileNode struct{ fileNode }

var _ = (gofs.NodeGetattrer)((*failedFileNode)(nil))

// Getattr is fileNode's with mode 0400.
func (n *failedFileNode) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if e := n.fileNode.Getattr(ctx, fh, out); e != 0 {
		return e
	}
	out.Mode = syscall.S_IFREG | 0o400
	return 0
}

// failedContent is the bytes of a kept file, read from the disk.
type failedContent struct {
	d   *failedDir
	rel string
}

// root is d.open with a directory that is not there as ENOENT.
func (d *failedDir) root() (*os.Root, error) {
	r, err := d.open()
	if r == nil && err == nil {
		return nil, syscall.ENOENT
	}
	return r, err
}

func (c *failedContent) stat() (os.FileInfo, error) {
	root, err := c.d.root()
	if err != nil {
		return nil, err
	}
	defer root.Close()
	return root.Stat(c.rel)
}

func (c *failedContent) size(ctx context.Context) (int64, error) {
	st, err := c.stat()
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

func (c *failedContent) readAt(ctx context.Context, p []byte, off int64) (int, error) {
	root, err := c.d.root()
	if err != nil {
		return 0, err
	}
	defer root.Close()
	f, err := root.Open(c.rel)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n, err := f.ReadAt(p, off)
	if errors.Is(err, io.EOF) {
		err = nil
	}
	return n, err
}

// mtime is when the data was kept (the file's name says it too).
func (c *failedContent) mtime() time.Time {
	st, err := c.stat()
	if err != nil {
		return time.Time{}
	}
	return st.ModTime()
}
func (c *failedContent) immutable() bool { return true }

// failedStats counts the files kept in the failed directory and their
// bytes, for .pugmark/stats.
func (f *FS) failedStats() (files int, bytes int64) {
	filepath.WalkDir(f.cfg.FailedDir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if st, err := d.Info(); err == nil {
				files++
				bytes += st.Size()
			}
		}
		return nil
	})
	return files, bytes
}
