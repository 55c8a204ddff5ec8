package staging

import "errors"

// The errors of the name operations, each what POSIX asks a filesystem
// to report; fs/errno.go maps them to their errnos. They are the
// package's own, not io/fs's: an errno matches fs.ErrExist for ENOTEMPTY
// too, and the mapping must tell the two apart.
var (
	// ErrNotExist: the name has no file or directory.
	ErrNotExist = errors.New("no such file or directory")
	// ErrExist: the target exists (a rename with RENAME_NOREPLACE).
	ErrExist = errors.New("file exists")
	// ErrIsDir: a file operation named a directory.
	ErrIsDir = errors.New("is a directory")
	// ErrNotDir: a directory operation named a file.
	ErrNotDir = errors.New("not a directory")
	// ErrNotEmpty: rmdir, or a rename onto a directory, of a directory
	// that holds something (local directories count).
	ErrNotEmpty = errors.New("directory not empty")
	// ErrIntoItself: a rename of a directory to below itself.
	ErrIntoItself = errors.New("rename of a directory into itself")
	// ErrCrossSend: a rename into or out of a SendDir/<target>/ of a
	// session. What goes there is a cross-session write, made by
	// writing the file there: mv then copies (EXDEV), as between file
	// systems, where a rename moved the descriptor as a plain file of
	// the session, delivered to nobody.
	ErrCrossSend = errors.New("rename into or out of a cross-session send directory")
	// ErrClosed is a read of a staged file after its last release
	// closed the spill file: the reader looks again (the committed
	// entry answers now).
	ErrClosed = errors.New("staged file already released")
	// ErrChanged: an open for writing found that another writer changed
	// or removed the file since the front end looked it up (OpenFresh).
	// The front end has the name looked up again and retries (ESTALE
	// does that in the kernel).
	ErrChanged = errors.New("changed by another writer since it was looked up")
)
