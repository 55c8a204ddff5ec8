package localblob

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"sort"
	"strings"
	"sync"

	"gocloud.dev/blob/driver"
	"golang.org/x/sys/unix"
)

// Listing.
//
// Keys sharing a prefix that ends in "/" live in one directory, so a
// listing starts at the directory the prefix names and walks only what it
// must, in key order:
//
//   - Within a directory, entries are ordered by the bytes of the keys they
//     contribute: a file by its decoded name, a directory by its decoded
//     name plus "/" (directory "a" holds keys "a/...", which sort after
//     "a-b" and before "a0"). Components never contain "/", so this order
//     of entries is exactly the order of the keys beneath them.
//   - A subtree whose keys all sort at or before the page token is skipped
//     unread.
//   - With a delimiter, a subdirectory whose keys all collapse into one
//     common prefix is read only until it yields one object (directories
//     holding no object are not prefixes, as on S3), then skipped.
//
// So LIST(prefix="sessions/x/y/snapshots/", max-keys=1) reads exactly that
// one directory. Large directories are read whole on every page (readdir
// has no order to resume from); that costs one getdents pass per page, no
// stat calls except for the objects returned.

// errStop ends a walk once the page is full.
var errStop = errors.New("page full")

type lister struct {
	ctx      context.Context
	b        *bucket
	prefix   string
	delim    string
	token    string
	pageSize int

	page   []*driver.ListObject
	lastCP string
	more   bool
}

// ListPaged implements driver.Bucket.
func (b *bucket) ListPaged(ctx context.Context, opts *driver.ListOptions) (*driver.ListPage, error) {
	if opts.BeforeList != nil {
		if err := opts.BeforeList(func(any) bool { return false }); err != nil {
			return nil, err
		}
	}
	if err := b.enter("list", opts.Prefix); err != nil {
		return nil, err
	}
	defer b.leave()
	l := &lister{
		ctx: ctx, b: b,
		prefix: opts.Prefix, delim: opts.Delimiter,
		token: string(opts.PageToken), pageSize: opts.PageSize,
	}
	if l.pageSize <= 0 {
		l.pageSize = defaultPageSize
	}
	if err := l.run(); err != nil && err != errStop {
		return nil, newError(codeUnknown, "list", opts.Prefix, err)
	}
	page := &driver.ListPage{Objects: l.page}
	if l.more {
		page.NextPageToken = []byte(l.page[len(l.page)-1].Key)
	}
	return page, nil
}

// after reports whether item sorts after the page token (and so belongs
// on this page).
func (l *lister) after(item string) bool { return l.token == "" || item > l.token }

// collapse returns the common prefix key falls into under the delimiter.
func (l *lister) collapse(key string) (string, bool) {
	if l.delim == "" {
		return "", false
	}
	rel := key[len(l.prefix):]
	i := strings.Index(rel, l.delim)
	if i < 0 {
		return "", false
	}
	return l.prefix + rel[:i+len(l.delim)], true
}

func (l *lister) emit(o *driver.ListObject) error {
	if len(l.page) >= l.pageSize {
		l.more = true
		return errStop
	}
	l.page = append(l.page, o)
	return nil
}

func (l *lister) run() error {
	comps := strings.Split(l.prefix, "/")
	filter := comps[len(comps)-1]
	dirs := comps[:len(comps)-1]
	keyDir := l.prefix[:len(l.prefix)-len(filter)]
	if l.token != "" && keyDir != "" && keyDir < l.token && !strings.HasPrefix(l.token, keyDir) {
		return nil // every key under keyDir sorts before the token
	}
	names := make([]string, len(dirs))
	for i, c := range dirs {
		names[i] = escapeComp(c, i == 0)
		if len(names[i]) > maxNameLen {
			return nil // no such directory can exist
		}
	}
	rel := "."
	if len(names) > 0 {
		rel = strings.Join(names, "/")
	}
	fd, err := openDir(l.b.rootfd, rel)
	if err != nil {
		if notFound(err) {
			return nil
		}
		return err
	}
	defer closeFD(fd)
	return l.walk(fd, keyDir, filter, len(dirs) == 0)
}

func (l *lister) walk(dfd int, keyDir, filter string, atRoot bool) error {
	ents, err := readEntries(dfd, atRoot, filter)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := l.ctx.Err(); err != nil {
			return err
		}
		if e.dir {
			dk := keyDir + e.comp + "/"
			if l.token != "" && dk < l.token && !strings.HasPrefix(l.token, dk) {
				continue
			}
			if cp, ok := l.collapse(dk); ok {
				if !l.after(cp) || cp == l.lastCP {
					continue
				}
				has, err := l.subtree(dfd, e.name, hasObject)
				if err != nil {
					return err
				}
				if has {
					if err := l.emit(&driver.ListObject{Key: cp, IsDir: true}); err != nil {
						return err
					}
					l.lastCP = cp
				}
				continue
			}
			if _, err := l.subtree(dfd, e.name, func(fd int) (bool, error) {
				return false, l.walk(fd, dk, "", false)
			}); err != nil {
				return err
			}
			continue
		}
		key := keyDir + e.comp
		if cp, ok := l.collapse(key); ok {
			if l.after(cp) && cp != l.lastCP {
				if err := l.emit(&driver.ListObject{Key: cp, IsDir: true}); err != nil {
					return err
				}
				l.lastCP = cp
			}
			continue
		}
		if !l.after(key) {
			continue
		}
		st, err := fstatat(dfd, e.name)
		if err != nil || !isReg(&st) {
			continue // gone since readdir, or replaced by a directory
		}
		if err := l.emit(&driver.ListObject{Key: key, ModTime: modTime(&st), Size: st.Size}); err != nil {
			return err
		}
	}
	return nil
}

// subtree opens the subdirectory name of dfd and runs fn on it; a
// subdirectory that vanished meanwhile counts as empty.
func (l *lister) subtree(dfd int, name string, fn func(fd int) (bool, error)) (bool, error) {
	fd, err := openDir(dfd, name)
	if err != nil {
		if notFound(err) {
			return false, nil
		}
		return false, err
	}
	defer closeFD(fd)
	return fn(fd)
}

// hasObject reports whether the directory fd holds an object anywhere
// beneath it. It stops at the first one, so for a normal bucket (where
// Delete prunes empty directories) it reads one directory per level.
func hasObject(fd int) (bool, error) {
	ents, err := readEntries(fd, false, "")
	if err != nil {
		return false, err
	}
	for _, e := range ents {
		if !e.dir {
			return true, nil
		}
	}
	for _, e := range ents {
		sub, err := openDir(fd, e.name)
		if err != nil {
			if notFound(err) {
				continue
			}
			return false, err
		}
		has, err := hasObject(sub)
		closeFD(sub)
		if has || err != nil {
			return has, err
		}
	}
	return false, nil
}

// direntBufs recycles getdents buffers: a delimited listing reads one
// directory per common prefix.
var direntBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

type entry struct {
	name string // on disk
	comp string // decoded key component
	dir  bool
	sort string // comp, plus "/" for a directory
}

// readEntries returns the regular files and directories of fd that are
// canonical key encodings starting with filter, in key order. At the root
// it hides the driver's own ".pugfs-" names.
func readEntries(fd int, atRoot bool, filter string) ([]entry, error) {
	dirReads.Add(1)
	var ents []entry
	bp := direntBufs.Get().(*[]byte)
	defer direntBufs.Put(bp)
	buf := *bp
	for {
		var n int
		err := retryEINTR(func() error {
			var err error
			n, err = unix.Getdents(fd, buf)
			return err
		})
		if errors.Is(err, unix.ENOENT) {
			// getdents on a directory removed since we opened it (pruned
			// by a concurrent Delete): it holds nothing.
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			break
		}
		for off := 0; off < n; {
			// struct linux_dirent64: ino u64, off s64, reclen u16, type u8, name.
			rec := buf[off:]
			reclen := int(binary.NativeEndian.Uint16(rec[16:18]))
			typ := rec[18]
			nameb := rec[19:reclen]
			if i := bytes.IndexByte(nameb, 0); i >= 0 {
				nameb = nameb[:i]
			}
			off += reclen
			name := string(nameb)
			if name == "." || name == ".." || (atRoot && strings.HasPrefix(name, reservedPrefix)) {
				continue
			}
			comp, ok := unescapeComp(name, atRoot)
			if !ok || !strings.HasPrefix(comp, filter) {
				continue
			}
			if typ == unix.DT_UNKNOWN {
				st, err := fstatat(fd, name)
				if err != nil {
					continue
				}
				switch {
				case isReg(&st):
					typ = unix.DT_REG
				case isDir(&st):
					typ = unix.DT_DIR
				}
			}
			switch typ {
			case unix.DT_REG:
				ents = append(ents, entry{name: name, comp: comp, sort: comp})
			case unix.DT_DIR:
				ents = append(ents, entry{name: name, comp: comp, dir: true, sort: comp + "/"})
			}
			// Symlinks, FIFOs and devices are not objects.
		}
	}
	sort.Slice(ents, func(i, j int) bool { return ents[i].sort < ents[j].sort })
	return ents, nil
}
