package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pugmark/pugfs/cache"
	pfs "github.com/pugmark/pugfs/fs"
	"github.com/pugmark/pugfs/layout"
	"github.com/pugmark/pugfs/layout/deadlineblob"
	"github.com/pugmark/pugfs/layout/schedblob"
	"github.com/pugmark/pugfs/staging"
	"gocloud.dev/gcerrors"
	"golang.org/x/sys/unix"
)

// exitTempFail is the exit status of a run that committed nothing but may
// succeed if retried (EX_TEMPFAIL, decisions.md "A handler invocation"):
// the checkpoint lost to another, the session's name moved, or the
// backend failed the commit.
const exitTempFail = 75

// exitUnknown is the exit status of a run whose checkpoint may have
// landed: its PUT's reply was lost and the bucket did not answer the read
// that would tell (EX_IOERR; 75 would say nothing landed, and a
// supervisor would run the handler again on input it may have consumed).
const exitUnknown = 74

// execInnerEnv marks the re-executed pugfs exec that runs inside its own
// namespaces (see runExecOuter); its value is execAliveFD.
const execInnerEnv = "PUGFS_EXEC_NAMESPACE"

// credentialEnv are environment variables that carry the bucket's cloud
// credentials, or lead to them, whatever credentialWords say: the
// handler does not get them unless --pass-credentials asks (README,
// Security).
var credentialEnv = []string{
	"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
	"AZURE_STORAGE_KEY", "AZURE_STORAGE_SAS_TOKEN", "AZURE_STORAGE_CONNECTION_STRING", "AZURE_CLIENT_SECRET",
	"GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_OAUTH_ACCESS_TOKEN",
	// Azure's managed identity (App Service, Functions, Arc): the
	// endpoint and its header are the token for the asking (review 31).
	"IDENTITY_ENDPOINT", "IDENTITY_HEADER", "MSI_ENDPOINT", "MSI_SECRET", "IMDS_ENDPOINT",
}

// credentialPrefixes and credentialWords name the others: a variable of
// a cloud's SDK whose name says it holds or points at a secret. A fixed
// list let through AWS_CONTAINER_AUTHORIZATION_TOKEN with
// AWS_CONTAINER_CREDENTIALS_FULL_URI (ECS, EKS Pod Identity: the bucket's
// credentials for the asking), AZURE_CLIENT_CERTIFICATE_PASSWORD and the
// token files (audit 29). Region, endpoint and profile names stay.
var (
	credentialPrefixes = []string{"AWS_", "AZURE_", "GOOGLE_", "GCLOUD_", "CLOUDSDK_", "GCP_", "GCE_"}
	credentialWords    = []string{"SECRET", "TOKEN", "PASSWORD", "CREDENTIAL", "KEY", "CERTIFICATE", "PRIVATE"}
)

// isCredentialEnv reports whether environment variable k carries (or
// leads to) cloud credentials.
func isCredentialEnv(k string) bool {
	if slices.Contains(credentialEnv, k) {
		return true
	}
	for _, p := range credentialPrefixes {
		if strings.HasPrefix(k, p) {
			for _, w := range credentialWords {
				if strings.Contains(k, w) {
					return true
				}
			}
		}
	}
	return false
}

// execConfig is what pugfs exec was asked for.
type execConfig struct {
	mount   mountConfig
	session string
	argv    []string
	// passCredentials keeps the cloud credentials in the handler's
	// environment.
	passCredentials bool
	// late is what the checkpoint does with inputs that landed while the
	// handler ran (--late-input).
	late staging.LateInput
	// quits has a value for each SIGQUIT the handler is to get: whether
	// it reached the handler's process group directly (quitsReached).
	quits <-chan bool
}

func execCommand() *command {
	return &command{
		name:      "exec",
		synopsis:  "pugfs exec [flags] BUCKET-URL SESSION -- COMMAND [ARGS...]",
		dashAfter: 2,
		short:     "run a handler in a session; its changes land as one checkpoint, or not at all",
		long: `
Runs COMMAND as one handler invocation of SESSION (a 32-hex ID, or a name
from refs/sessions/<name>), per tree.md "Running a handler":

1. Pending forks of the session's latest snapshot are materialised (§11.2).
2. The bucket is mounted privately (in mount and PID namespaces of their
   own when pugfs runs as root, so no other process sees it, and it and
   every process COMMAND started are gone when pugfs exec is gone, even
   by SIGKILL) and COMMAND runs in the session's
   directory there, with PUGMARK_SESSION (the ID), PUGMARK_VERSION (the
   base version) and PUGMARK_ROOT (the mount root) set. Every change stays
   staged while it runs, whatever it fsyncs.
   A file written under .pugmark/send/<target-id>/<name> is a
   cross-session write (§12): recorded in the checkpoint, then delivered
   to the target as a provisional snapshot, once even if retried.
3. Exit 0: the session's name ref is re-read from the bucket (§9.1) and
   must still point at this session; then every change lands as ONE
   checkpoint on the base version (after provisional or queueing
   snapshots that arrived meanwhile, §13.3).
   Non-zero exit: nothing lands; pugfs exec exits with COMMAND's status.
   A lost checkpoint (another one landed first) or a moved name: nothing
   lands, exit status 75, the reason on stderr, the staged files kept in
   the failed directory.

The handler's environment has no cloud credentials (AWS_*, AZURE_*,
GOOGLE_* secrets) unless --pass-credentials. Exit status: COMMAND's
(its 74 and 75 too), 75 when nothing landed but a retry may succeed, 74
when the checkpoint may have landed but the bucket did not answer whether
it did (asked again for 5x --request-timeout), 1 when pugfs exec failed,
2 for a usage error.`,
		examples: `  pugfs exec ./bucket demo -- sh -c 'wc -l notes/*.md > summary.txt'
  pugfs exec s3://bucket?region=eu-west-1 0190a1b2c3d4e5f60718293a4b5c6d7e -- ./handler.py
  pugfs exec --cache-dir=/var/cache/pugfs ./bucket inbox -- ./triage.py`,
		setup: func(fs *flag.FlagSet) func(context.Context, *stdio, []string) error {
			var cfg execConfig
			var uid, gid int
			cacheSize := sizeFlag(defaultCacheSize)
			umask := octalFlag(0o022)
			fs.DurationVar(&cfg.mount.MetadataTTL, "metadata-ttl", time.Second, "how long listings and latest versions are trusted, a `DURATION`")
			fs.StringVar(&cfg.mount.CacheDir, "cache-dir", "", "`DIR` for the disk cache, staged writes and failed/; off keeps no cache on disk (default: $XDG_CACHE_HOME/pugfs/<bucket>, else ~/.cache/pugfs/<bucket>)")
			fs.Var(&cacheSize, "cache-size", "memory budget of the blob cache, a `SIZE`")
			fs.BoolVar(&cfg.mount.Debug, "debug", false, "log every FUSE request and bucket call to stderr")
			fs.IntVar(&uid, "uid", -1, "owner `UID` of every file (default: the user running pugfs)")
			fs.IntVar(&gid, "gid", -1, "group `GID` of every file (default: the user's group)")
			fs.Var(&umask, "umask", "permission bits to clear, in `OCTAL`")
			fs.DurationVar(&cfg.mount.RequestTimeout, "request-timeout", deadlineblob.DefaultTimeout, "give up on a bucket request that has made no progress for this `DURATION`")
			fs.IntVar(&cfg.mount.MaxRequests, "max-requests", schedblob.DefaultMaxRequests, "at most `N` bucket requests in flight at once")
			fs.BoolVar(&cfg.passCredentials, "pass-credentials", false, "keep the cloud credentials in COMMAND's environment")
			late := "merge"
			fs.StringVar(&late, "late-input", late, "what the checkpoint does with inputs (provisional or queueing snapshots) that arrive while COMMAND runs, `MODE`: merge (land above them; they count as consumed though COMMAND never saw them, §13.3) or abort (nothing lands, exit 75, so that the next run sees them with the rest)")
			return func(ctx context.Context, sio *stdio, args []string) error {
				if len(args) < 3 {
					return usagef("want BUCKET-URL, SESSION, -- and a COMMAND")
				}
				var err error
				if cfg.mount.BucketURL, _, err = bucketURL(args[0]); err != nil {
					return err
				}
				cfg.session, cfg.argv = args[1], args[2:]
				if cfg.mount.MetadataTTL < 0 || cfg.mount.RequestTimeout <= 0 || cfg.mount.MaxRequests <= 0 {
					return usagef("--metadata-ttl must not be negative, --request-timeout and --max-requests must be positive")
				}
				if cfg.mount.CacheSize = int64(cacheSize); cfg.mount.CacheSize <= 0 {
					return usagef("--cache-size must be positive")
				}
				cfg.mount.Umask = uint32(umask)
				if cfg.mount.UID, err = idFlag("uid", uid, os.Getuid()); err != nil {
					return err
				}
				if cfg.mount.GID, err = idFlag("gid", gid, os.Getgid()); err != nil {
					return err
				}
				switch late {
				case "merge":
					cfg.late = staging.MergeLateInput
				case "abort":
					cfg.late = staging.RefuseLateInput
				default:
					return usagef("--late-input=%s: want merge or abort", late)
				}
				// A handler's mount: everything staged until the command
				// exits, committed as the session's own checkpoint.
				cfg.mount.Commit, cfg.mount.SnapshotType = commitOnFsync, layout.Checkpoint
				cfg.mount.FastPath = fastAuto.resolve(false)
				hideCredentials()
				if !execInner {
					if code, ok := runExecOuter(ctx, sio); ok {
						return exitCode(code)
					}
				}
				err = runExec(ctx, sio, cfg)
				var ee *exitError
				var ce *commitError
				if err != nil && ctx.Err() != nil && !errors.As(err, &ee) && !errors.As(err, &ce) {
					// Interrupted before the handler ran (or while it was
					// committed): the status a shell shows for a signal.
					fmt.Fprintf(sio.err, "pugfs exec: interrupted: %v (nothing committed)\n", oneLine(err))
					return exitCode(128 + int(signalOf(ctx)))
				}
				return err
			}
		},
	}
}

// hideCredentials makes this process non-dumpable, before it starts
// the handler: the handler runs as the same user, and read the cloud
// credentials it is not given (credentialEnv) from this process's
// /proc/<pid>/environ, or could ptrace it for them (audit 14). A
// non-dumpable process's /proc files and memory are closed to processes
// without CAP_SYS_PTRACE; root keeps it, and a handler run as root can
// read anything of the machine. Each process of pugfs exec sets it (an
// execve resets it): the one the user started and the one it runs in
// its namespaces.
func hideCredentials() {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		fmt.Fprintf(os.Stderr, "pugfs exec: could not hide the credentials from the handler (prctl: %v)\n", err)
	}
}

// exitCode is the error that makes pugfs exit with code (nil for 0).
func exitCode(code int) error {
	if code == 0 {
		return nil
	}
	return &exitError{code}
}

// runExecOuter runs this same pugfs exec again as PID 1 of a PID
// namespace of its own, in a mount namespace of its own (mounts made
// private), and returns its exit status (execns.go says why). ok is false
// when the namespaces cannot be had (not root): the caller then runs the
// invocation itself, and a SIGKILL of pugfs exec may leave a dead mount
// and the handler's processes behind.
//
// Why namespaces: the mount and the handler's processes must be gone
// whenever pugfs exec is, and SIGKILL runs no cleanup. A mount in a
// namespace only the invocation's processes share is seen by no other
// process and disappears with the last of them, and the last of them end
// with the PID namespace's first process; that one gets SIGKILL when this
// process dies. A watchdog process would need cleaning up itself, and
// could be killed too.
func runExecOuter(ctx context.Context, sio *stdio) (code int, ok bool) {
	self, err := os.Executable()
	if err != nil {
		return 0, false
	}
	// SIGINT, SIGTERM and SIGHUP go to the child, which passes them to the
	// handler and commits nothing; SIGQUIT goes too (quitTo). They are caught from here on, and
	// one that came before (main caught it) means no run at all.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, append(stopSignals, syscall.SIGQUIT)...)
	defer signal.Stop(sigs)
	if ctx.Err() != nil {
		return 128 + int(signalOf(ctx)), true
	}
	alive, aliveW, err := os.Pipe()
	if err != nil {
		return 0, false
	}
	defer aliveW.Close()
	// The child says on this pipe when it catches signals itself: until
	// then, as PID 1 of its namespace, it would lose one (the kernel
	// drops a signal from outside to a namespace's first process that has
	// no handler for it, and the Go runtime's default action is such a
	// drop), so what comes before is held and sent then.
	ready, readyW, err := os.Pipe()
	if err != nil {
		return 0, false
	}
	defer ready.Close()
	// Signals are passed on to the child on a third pipe, not as
	// signals: it tells those sent to pugfs exec alone from those that
	// reached the whole process group, the handler with it
	// (execsignals.go).
	forward, forwardW, err := os.Pipe()
	if err != nil {
		return 0, false
	}
	defer forwardW.Close()
	// The parent-death signal fires when the thread that forked the
	// child ends: keep this goroutine on its thread until the child is
	// gone.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var cmd *exec.Cmd
	// A PID namespace may be refused where a mount namespace is not (a
	// container's seccomp profile): then the handler's own processes are
	// still ended when it exits (killLeftovers), only not on a SIGKILL.
	for _, clone := range []uintptr{syscall.CLONE_NEWPID, 0} {
		cmd = exec.Command(self, os.Args[1:]...)
		cmd.Env = append(os.Environ(), execInnerEnv+"="+strconv.Itoa(execAliveFD))
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, sio.out, sio.err
		cmd.ExtraFiles = []*os.File{alive, readyW, forward}
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: clone, Unshareflags: syscall.CLONE_NEWNS}
		if err = cmd.Start(); err == nil || !(errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EINVAL)) {
			break
		}
	}
	alive.Close()
	readyW.Close()
	forward.Close()
	if err != nil {
		if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EINVAL) {
			return 0, false
		}
		fmt.Fprintf(sio.err, "pugfs exec: start: %v\n", err)
		return 1, true
	}
	armed := make(chan struct{})
	go func() {
		var b [1]byte
		ready.Read(b[:]) // a byte, or EOF: the child is gone
		close(armed)
	}()
	done := make(chan struct{})
	go func() {
		var held []os.Signal
		for {
			select {
			case s := <-sigs:
				if armed == nil {
					passSignal(forwardW, s)
				} else {
					held = append(held, s)
				}
			case <-armed:
				for _, s := range held {
					passSignal(forwardW, s)
				}
				held, armed = nil, nil // armed: the case is done with
			case <-done:
				return
			}
		}
	}()
	err = cmd.Wait()
	close(done)
	return statusOf(cmd.ProcessState, err), true
}

// statusOf is the exit status a shell would show for a finished process:
// its code, or 128+signal.
func statusOf(ps *os.ProcessState, err error) int {
	if ps == nil {
		if err != nil {
			return 1
		}
		return 0
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// runExec is one handler invocation: forks, mount, command, commit.
func runExec(ctx context.Context, sio *stdio, cfg execConfig) (err error) {
	committing := false
	defer func() {
		var ee *exitError
		if committing && err != nil && !errors.As(err, &ee) {
			err = &commitError{err}
		}
	}()
	cfg.quits = quitsReached(catchQuit())
	level := slog.LevelWarn // stderr belongs to the handler
	if cfg.mount.Debug {
		level = slog.LevelDebug
	}
	log := mountLogger(cfg.mount, level)
	env, err := prepareMount(ctx, cfg.mount, log, true)
	if err != nil {
		return err
	}
	defer env.close()
	store := env.store
	id, st, err := handlerBase(ctx, sio.err, env, cfg.session)
	if perr := env.probed(); perr != nil {
		return perr
	}
	if err != nil {
		return err
	}
	base, man := st.Position(), st.Manifest
	// The handler sees its session at the base version for the whole
	// run: what landed since is merged under its checkpoint unseen (or
	// refused, --late-input=abort), as this says when it happens.
	env.cache.Freeze(st)
	defer env.cache.Thaw()
	// §9.1: the name the session was given by, and its manifest's, must
	// still be this session's when the run ends.
	var names []string
	if man.Name != "" {
		names = append(names, man.Name)
	}
	if _, perr := layout.ParseSessionID(cfg.session); perr != nil && cfg.session != man.Name {
		names = append(names, cfg.session)
	}
	if man.Name != "" && man.Name != cfg.session {
		// Run by ID (or another name): the manifest's name may belong
		// to another session already, and then no run can ever land
		// (75 "retry", again and again, each after a whole handler run).
		// Said now, before the handler runs, and not as a retry.
		if err := store.CheckSessionRef(ctx, man.Name, id); errors.Is(err, layout.ErrRefMoved) || errors.Is(err, layout.ErrNotFound) {
			return fmt.Errorf("session %s is named %q, but refs/sessions/%s does not point at it (§9.1): %v; nothing run", id, man.Name, man.Name, oneLine(err))
		}
	}

	mnt, release, err := execMountpoint(env.stateDir)
	if err != nil {
		return err
	}
	if abs, err := filepath.Abs(mnt); err == nil {
		mnt = abs // PUGMARK_ROOT, for a handler that is elsewhere (--cache-dir=relative)
	}
	defer func() { os.Remove(mnt); release() }()
	// The invocation is one checkpoint of this session: nothing else
	// (another session, memories, refs, a new session) may land while
	// the handler runs, nor at all if it fails; cross-session output
	// goes through .pugmark/send/.
	env.fs.WriteOnly(id)
	srv, err := pfs.Mount(mnt, env.fs, pfs.MountOptions{FsName: env.shownURL, Debug: cfg.mount.Debug})
	if err != nil {
		return mountError(err)
	}
	mounted := true
	unmount := func() error {
		if !mounted {
			return nil
		}
		mounted = false
		return unmountServer(srv, mnt, log)
	}
	defer unmount()

	if err := ownProc(); err != nil {
		log.Warn("cannot mount the PID namespace's /proc: the handler's /proc shows the host's processes", "err", err)
	}
	// Descendants the handler leaves behind become this process's
	// children (a subreaper), so they can be ended with it.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		log.Warn("cannot collect the handler's leftover processes", "err", err)
	}
	code, runErr := runHandler(ctx, sio, cfg, mnt, id, base.Version)
	// The handler must not outlive pugfs exec, nor what it started: a
	// background process still running would hold the mount busy, and
	// what it wrote from now on could not land. What it wrote until now
	// lands as it is: the files it holds open for writing are named, as
	// one of them may be cut short.
	sessDir := filepath.Join(mnt, "sessions", id.String())
	if held := heldForWriting(childrenOf("self"), sessDir); len(held) > 0 {
		log.Warn("processes the handler left running hold files of the session open for writing: they land as written so far", "files", held)
	}
	if n := killLeftovers(); n > 0 {
		log.Warn("ended processes the handler left running", "count", n)
	}
	// Nothing can change once the mount is gone, so the commit holds
	// exactly what the handler left (what a background child of it wrote
	// before the handler exited too).
	if err := unmount(); err != nil {
		env.fs.DiscardSession(id)
		return err
	}
	if runErr != nil {
		env.fs.DiscardSession(id)
		return runErr
	}
	if code != 0 {
		// tree.md: "pugfs exec exits with the command's status", its 74
		// and 75 too, as a shell's exec would. A supervisor that takes
		// a 74 for "may have landed" finds the checkpoint where it was
		// (the session's .pugmark/checkpoint is not above the run's
		// PUGMARK_VERSION): nothing landed.
		env.fs.DiscardSession(id)
		if code == exitUnknown || code == exitTempFail {
			fmt.Fprintf(sio.err, "pugfs exec: the command exited %d; nothing was committed\n", code)
		}
		return exitCode(code)
	}
	// From here on a signal stops nothing: stopped, the checkpoint's
	// outcome would be unknown. Each says so (three Ctrl-Cs got 30 s of
	// silence from a run committing to a bucket that had stopped: audit
	// 10).
	defer noteSignals(sio.err)()
	committing = true
	// The output is whole: from here on a SIGKILL or a crash leaves it
	// to the next run's sweep, which keeps it under failed/, as an exit
	// 74 does (it removed it: audit 19).
	env.fs.KeepOnCrash(id)
	cctx := context.WithoutCancel(ctx)
	// kept keeps what is staged and says where, or that it could not:
	// "kept" of copies a full disk never let be made told a supervisor
	// the output could be recovered (audit 8).
	kept := func() string {
		dir := filepath.Join(env.failedDir, id.String())
		n, lost := env.fs.KeepSession(id)
		if lost > 0 {
			return fmt.Sprintf("%d staged file(s) could NOT be kept (the log says why), %d kept under %s", lost, n, dir)
		}
		return "staged files are kept under " + dir
	}
	for _, n := range names {
		if err := store.CheckSessionRef(cctx, n, id); err != nil {
			if errors.Is(err, layout.ErrRefMoved) || errors.Is(err, layout.ErrNotFound) {
				fmt.Fprintf(sio.err, "pugfs exec: nothing committed: the session's name moved (§9.1): %v; %s\n", err, kept())
				return exitCode(exitTempFail)
			}
			if transient(err) {
				// The bucket failed or did not answer: a retry may
				// succeed, as for a commit the backend failed.
				fmt.Fprintf(sio.err, "pugfs exec: nothing committed: re-check refs/sessions/%s: %v; %s\n", n, oneLine(err), kept())
				return exitCode(exitTempFail)
			}
			return fmt.Errorf("re-check refs/sessions/%s: %w (nothing committed)", n, err)
		}
	}
	env.cache.Thaw() // the commit looks at the session as it is
	res, err := env.fs.CommitSession(cctx, id, base, cfg.late)
	var unknown *layout.OutcomeUnknownError
	if errors.As(err, &unknown) {
		r, landed, rerr := resolveCheckpoint(cctx, sio.err, store, unknown, resolveFor*cfg.mount.RequestTimeout)
		switch {
		case rerr != nil:
			fmt.Fprintf(sio.err, "pugfs exec: the checkpoint may have landed (its outcome is unknown: %v); it did if, once the bucket answers, the session's .pugmark/checkpoint is above %d; %s\n", oneLine(err), base.Version, kept())
			return exitCode(exitUnknown)
		case !landed && tooManyFiles(err):
			return tooManyFilesExit(sio, err, kept)
		case !landed:
			fmt.Fprintf(sio.err, "pugfs exec: nothing committed: the bucket answered that checkpoint %d did not land (%v); %s\n", unknown.Version, oneLine(err), kept())
			return exitCode(exitTempFail)
		}
		// It landed: what is staged is in the bucket, not a failure
		// to keep.
		env.fs.DiscardSession(id)
		res, err = r, nil
	}
	if err != nil {
		if errors.Is(err, layout.ErrLateInput) {
			fmt.Fprintf(sio.err, "pugfs exec: nothing committed: input arrived while the handler ran (--late-input=abort; the next run sees it): %v; %s\n", err, kept())
			return exitCode(exitTempFail)
		}
		if tooManyFiles(err) {
			return tooManyFilesExit(sio, err, kept)
		}
		if errors.Is(err, layout.ErrConflict) || errors.Is(err, layout.ErrRetriesExhausted) || transient(err) {
			fmt.Fprintf(sio.err, "pugfs exec: nothing committed: %v; %s\n", err, kept())
			return exitCode(exitTempFail)
		}
		return err
	}
	if res.Version > base.Version+1 {
		mergedUnder(cctx, sio.err, env, id, base.Version, res)
	}
	// §12.2: the checkpoint holds the records; now the targets get their
	// copies. A failure here loses nothing: the next run delivers what
	// the latest checkpoint recorded (deliverSends), once.
	dls, err := store.DeliverCrossSession(cctx, id, res.Version, res.Descriptors)
	if err != nil {
		// The checkpoint landed: the run's input is consumed, and a
		// supervisor must not run it again (exit 0). The next run
		// delivers what this one recorded.
		fmt.Fprintf(sio.err, "pugfs exec: checkpoint %d of %s landed, but delivering its cross-session writes failed (the next run delivers them): %v\n", res.Version, id, oneLine(err))
		return nil
	}
	reportNoTarget(sio.err, id, res.Version, dls)
	return nil
}

// resolveFor is how many request timeouts pugfs exec keeps asking the
// bucket about a checkpoint whose outcome was unknown: the budget of one
// request with its retries.
const resolveFor = 5

// resolveCheckpoint asks the bucket, for up to bound, whether the
// checkpoint u left unknown landed. An error means it still did not say.
func resolveCheckpoint(ctx context.Context, w io.Writer, store *layout.Store, u *layout.OutcomeUnknownError, bound time.Duration) (layout.CommitResult, bool, error) {
	fmt.Fprintf(w, "pugfs exec: whether checkpoint %d landed is unknown (%s); asking the bucket again for up to %v\n", u.Version, firstLine(u.Err), bound)
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	for delay := 100 * time.Millisecond; ; delay = min(2*delay, 5*time.Second) {
		r, landed, err := store.ResolveCommit(ctx, u)
		if err == nil {
			if landed {
				fmt.Fprintf(w, "pugfs exec: checkpoint %d landed after all\n", r.Version)
			}
			return r, landed, nil
		}
		select {
		case <-ctx.Done():
			return layout.CommitResult{}, false, err
		case <-time.After(delay):
		}
	}
}

// tooManyFiles reports a commit that failed for the descriptors pugfs
// may hold: each file open for writing holds one while it is open (a
// released one is parked until the commit, staging.File), and a run that
// holds more open at once than the limit fails the same way every time. ENFILE, the
// system's table full, is not this: it depends on every other process,
// and a retry may succeed (review 15).
func tooManyFiles(err error) bool {
	return errors.Is(err, syscall.EMFILE)
}

// tooManyFilesExit says so and exits 1, not 75 ("a retry may succeed":
// audit 15).
func tooManyFilesExit(sio *stdio, err error, kept func() string) error {
	var lim unix.Rlimit
	unix.Getrlimit(unix.RLIMIT_NOFILE, &lim)
	fmt.Fprintf(sio.err, "pugfs exec: nothing committed: %s: the run held more files open at once than pugfs may (each file open for writing holds a descriptor in pugfs while it is open; its limit was %d, the hard limit, which ulimit -n cannot raise past), and a retry fails the same way unless the limit is raised; %s\n", firstLine(err), lim.Cur, kept())
	return exitCode(1)
}

// firstLine is oneLine of the first of the errors err joins (a commit's
// failed uploads, one a file), with how many more there are: one line
// of each was 500 bytes, a megabyte for a run of 20,000 files (audit 17).
func firstLine(err error) string {
	n, first := firstOf(err)
	if n == 1 {
		return oneLine(err)
	}
	return fmt.Sprintf("%s (and %d more like it)", oneLine(first), n-1)
}

// firstOf returns how many errors err joins (errors.Join), however deep,
// and the first of them; 1 and err itself when it joins none.
func firstOf(err error) (int, error) {
	switch u := err.(type) {
	case interface{ Unwrap() []error }:
		errs := u.Unwrap()
		if len(errs) == 0 {
			return 1, err
		}
		n, first := firstOf(errs[0])
		for _, e := range errs[1:] {
			k, _ := firstOf(e)
			n += k
		}
		return n, first
	case interface{ Unwrap() error }:
		if inner := u.Unwrap(); inner != nil {
			if n, first := firstOf(inner); n > 1 {
				return n, first
			}
		}
	}
	return 1, err
}

// transient reports whether a failed commit may succeed when retried: the
// backend failed or did not answer (decisions.md: exit 75 is "nothing
// landed, retrying may succeed"), as opposed to a refusal a retry meets
// again (permission, an invalid request).
func transient(err error) bool {
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) {
		return true
	}
	switch gcerrors.Code(err) {
	case gcerrors.Internal, gcerrors.Unknown, gcerrors.DeadlineExceeded, gcerrors.ResourceExhausted:
		return true
	}
	return false
}

// shadowed returns, for each name of ds that a file of live hides (a
// file named as one of its directories), the name and that file: a
// handler can only have made such a pair with an input that landed
// while it ran.
func shadowed(ds []layout.Descriptor, live map[string]layout.Entry) [][2]string {
	var out [][2]string
	for _, d := range ds {
		if d.Deleted || d.Fork || !d.TargetSession.IsZero() {
			continue
		}
		for i := strings.IndexByte(d.Name, '/'); i >= 0; i = next(d.Name, i) {
			if _, ok := live[d.Name[:i]]; ok {
				out = append(out, [2]string{d.Name, d.Name[:i]})
				break
			}
		}
	}
	return out
}

// next is the index of the '/' after index i of name, or -1.
func next(name string, i int) int {
	j := strings.IndexByte(name[i+1:], '/')
	if j < 0 {
		return -1
	}
	return i + 1 + j
}

// reportNoTarget says which cross-session writes of id@version had no
// session to go to: they stay recorded in the checkpoint, delivered to
// nobody.
func reportNoTarget(w io.Writer, id layout.SessionID, version uint32, dls []layout.Delivery) {
	for _, dl := range dls {
		if dl.Outcome == layout.NoTarget {
			fmt.Fprintf(w, "pugfs exec: the writes of %s@%d to %s are not delivered: there is no such session\n", id, version, dl.Target)
		}
	}
}

// mergedUnder says what landed while the handler ran, between base and
// the checkpoint res merged it under (§13.3), because the handler never
// saw it and no later run will, and materialises the forks recorded
// there: the next run completes those recorded since the latest
// checkpoint (handlerBase), which these are below. Fork records are not
// input (§11.2 step 4; a handler forking its own session makes them).
func mergedUnder(ctx context.Context, w io.Writer, env *mountEnv, id layout.SessionID, base uint32, res layout.CommitResult) {
	st, err := env.cache.State(ctx, id)
	if err != nil {
		fmt.Fprintf(w, "pugfs exec: versions %d-%d landed while the handler ran; checkpoint %d merged them (reading them: %v)\n", base+1, res.Version-1, res.Version, oneLine(err))
		return
	}
	var inputs []uint32
	touched := map[string]uint32{} // name -> the last input version that wrote or removed it
	for v := base + 1; v < res.Version; v++ {
		ds, _ := st.Snapshot(v)
		if !layout.NotInput(ds) {
			inputs = append(inputs, v)
			for _, d := range ds {
				if d.IsSlot() {
					touched[d.Name] = v
				}
			}
		}
		forks, err := env.store.PendingForksIn(ctx, id, v, ds)
		if err == nil {
			for _, f := range forks {
				_, err = env.store.MaterializeFork(ctx, f)
			}
		}
		if err != nil {
			fmt.Fprintf(w, "pugfs exec: the forks recorded in version %d are not materialised: %v\n", v, oneLine(err))
		}
	}
	if len(inputs) == 0 {
		return
	}
	fmt.Fprintf(w, "pugfs exec: %d input snapshot(s) landed while the handler ran (versions %s); checkpoint %d merged them unseen by the handler (--late-input=abort refuses instead)\n", len(inputs), versionList(inputs), res.Version)
	// The names both wrote: what the input did to them (an append, a
	// removal, a rename) is under the handler's version now, and only
	// in history (audit 28).
	var both []string
	for _, d := range res.Descriptors {
		if v, ok := touched[d.Name]; ok && d.IsSlot() {
			both = append(both, fmt.Sprintf("%s (input version %d)", d.Name, v))
			delete(touched, d.Name)
		}
	}
	if len(both) > 0 {
		sort.Strings(both)
		const shown = 20
		more := ""
		if len(both) > shown {
			more, both = fmt.Sprintf(" and %d more", len(both)-shown), both[:shown]
		}
		fmt.Fprintf(w, "pugfs exec: checkpoint %d replaces what those inputs wrote to %s%s: see .pugmark/at/<version>/ for theirs\n", res.Version, strings.Join(both, ", "), more)
	}
	for _, h := range shadowed(res.Descriptors, st.Slots()) {
		fmt.Fprintf(w, "pugfs exec: %s, written by the handler, does not show: an input made %s a file (a name both a file and a directory shows the file, decisions.md \"Names as paths\"); it is in .pugmark/log.jsonl\n", h[0], h[1])
	}
}

// versionList writes ascending versions as ranges: 3-5, 8.
func versionList(vs []uint32) string {
	var b strings.Builder
	for i := 0; i < len(vs); {
		j := i
		for j+1 < len(vs) && vs[j+1] == vs[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%d", vs[i])
		if j > i {
			fmt.Fprintf(&b, "-%d", vs[j])
		}
		i = j + 1
	}
	return b.String()
}

// handlerBase finds the session an invocation runs in (by ID or by name)
// and returns its state at the base version, read through the mount's
// own cache: the handler's first look at its directory then sends
// nothing, and the requests go out together (the hour's LIST, the
// manifest and the first snapshots in one round trip, the rest of a long
// history 64 at a time), where the steps before the handler used to be
// seven round trips in a row. On the way it delivers what the latest
// checkpoint recorded for other sessions and materialises the pending
// forks recorded since that checkpoint (§12.2, §11.2).
func handlerBase(ctx context.Context, w io.Writer, env *mountEnv, arg string) (layout.SessionID, *cache.State, error) {
	id, st, err := sessionState(ctx, env, arg)
	if err != nil {
		return id, nil, err
	}
	cp, ok, err := env.views.LatestCheckpoint(ctx, id, st.Version)
	if err != nil {
		return id, nil, fmt.Errorf("latest checkpoint of %s: %w", id, err)
	}
	if ok {
		// A run that committed and ended before delivering: the
		// (source-session, source-version) key makes a delivery that
		// did happen a no-op.
		ds, _ := st.Snapshot(cp)
		dls, err := env.store.DeliverCrossSession(ctx, id, cp, ds)
		if err != nil {
			return id, nil, fmt.Errorf("deliver the cross-session writes of %s@%d: %w", id, cp, err)
		}
		reportNoTarget(w, id, cp, dls)
	}
	// §11.2: the next invocation completes every fork recorded since
	// the last one, not only those of the latest snapshot: a provisional
	// snapshot that lands on top of a fork record (a cross-session write)
	// stranded its fork for good. The last invocation made the latest
	// checkpoint, so what it did not see starts there.
	from := uint32(1)
	if ok {
		from = cp
	}
	for v := from; v <= st.Version; v++ {
		ds, _ := st.Snapshot(v)
		forks, err := env.store.PendingForksIn(ctx, id, v, ds)
		if err != nil {
			return id, nil, fmt.Errorf("pending forks of %s: %w", id, err)
		}
		for _, f := range forks {
			if _, err := env.store.MaterializeFork(ctx, f); err != nil {
				return id, nil, err
			}
		}
	}
	return id, st, nil
}

// sessionState resolves arg (a session ID, else a name from
// refs/sessions/) and loads that session's state through the mount's
// cache, as the lookup of its directory does.
func sessionState(ctx context.Context, env *mountEnv, arg string) (layout.SessionID, *cache.State, error) {
	load := func(id layout.SessionID) (*cache.State, error) {
		if _, _, err := env.cache.Find(ctx, id); err != nil {
			return nil, err
		}
		return env.cache.State(ctx, id)
	}
	if id, err := layout.ParseSessionID(arg); err == nil {
		st, err := load(id)
		if !errors.Is(err, layout.ErrSessionNotFound) {
			return id, st, err
		}
		// A 32-hex name is possible; fall through to the name lookup.
	}
	id, err := env.store.ResolveSessionName(ctx, arg)
	switch {
	case errors.Is(err, layout.ErrInvalid):
		return id, nil, fmt.Errorf("session %q: not a session ID and not a valid session name", arg)
	case errors.Is(err, layout.ErrNotFound):
		return id, nil, fmt.Errorf("session %q does not exist (no such ID, and no refs/sessions/%s)", arg, arg)
	case err != nil:
		return id, nil, err
	}
	st, err := load(id)
	if errors.Is(err, layout.ErrSessionNotFound) {
		return id, nil, fmt.Errorf("refs/sessions/%s points at session %s, which has no manifest (run pugfs fsck)", arg, id)
	}
	return id, st, err
}

// execMountpoint makes the invocation's private mountpoint in
// stateDir/exec/, held until release (ownDir), after removing those of
// runs that are gone (a SIGKILLed run cannot remove its own; rmdir
// leaves anything in use or not empty alone).
func execMountpoint(stateDir string) (dir string, release func(), err error) {
	root := filepath.Join(stateDir, "exec")
	orphans(root, func(dir string) {
		if fstype, _ := topMount(dir); strings.HasPrefix(fstype, "fuse") {
			// A run that died without namespaces (not root) left its
			// mount: nothing serves it any more.
			detachMount(dir)
		}
		os.Remove(dir)
	})
	if dir, release, err = ownDir(root); err != nil {
		return "", nil, fmt.Errorf("mountpoint in %s: %w", root, err)
	}
	return dir, release, nil
}

// execChdirEnv hands the trampoline (execTrampoline) the directory to
// change to before it executes the handler, as "<pid of its parent>:<dir>"
// (trampolineDir).
const execChdirEnv = "PUGFS_EXEC_CHDIR"

// trampolineDir returns the directory execChdirEnv gives this process,
// if it was set by this process's parent: a stray PUGFS_EXEC_CHDIR in a
// caller's environment made every pugfs command a trampoline (review 38).
func trampolineDir() (string, bool) {
	v, ok := os.LookupEnv(execChdirEnv)
	if !ok {
		return "", false
	}
	pid, dir, ok := strings.Cut(v, ":")
	return dir, ok && pid == strconv.Itoa(os.Getppid())
}

// init keeps the trampoline's main goroutine on the main thread (a
// LockOSThread in init holds through main). The SIGKILL-on-parent-death
// that runHandler asks for (Pdeathsig) is an attribute of the thread the
// child started as, and threads the Go runtime makes do not have it: an
// execve from one of them drops it, and the handler would outlive a
// SIGKILLed pugfs exec. Where the main goroutine runs is up to the
// scheduler, and on a loaded machine it does move.
func init() {
	if _, ok := trampolineDir(); ok {
		runtime.LockOSThread()
	}
}

// execTrampoline runs first in main: when this process is the trampoline
// started by runHandler, it changes to the session's directory and
// replaces itself with the handler (os.Args[1] the program, the rest its
// arguments). It does not return then.
//
// Why a trampoline: a chdir into the mount between fork and exec (what
// exec.Cmd.Dir does) is a FUSE request that this very process must
// answer while it holds the fork lock; an answer that needs the lock
// (opening a socket or a pipe) never comes, and the child hangs for good
// in the kernel, holding the FUSE device open. After execve the
// trampoline is a process of its own and its chdir is an ordinary
// request.
func execTrampoline() {
	dir, ok := trampolineDir()
	if !ok {
		return
	}
	os.Unsetenv(execChdirEnv)
	if len(os.Args) < 2 {
		os.Exit(126)
	}
	if err := os.Chdir(dir); err != nil {
		fmt.Fprintf(os.Stderr, "pugfs exec: cannot change to %s: %v\n", dir, err)
		os.Exit(126)
	}
	os.Setenv("PWD", dir)
	// Arm the parent-death signal again on the thread that executes: the
	// setting is per thread, and only the executing thread's survives.
	ppid := os.Getppid()
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0); e != 0 || os.Getppid() != ppid {
		os.Exit(126) // the parent is gone already (or we cannot know when it goes)
	}
	err := syscall.Exec(os.Args[1], os.Args[1:], os.Environ())
	fmt.Fprintf(os.Stderr, "pugfs exec: %s: %v\n", os.Args[1], err)
	os.Exit(127)
}

// trampolineShell changes into the directory $0 and executes "$@": the
// handler, started by /bin/sh, not by pugfs itself (execTrampoline),
// when there is a /bin/sh: a shell starts in a millisecond, and pugfs in
// some 40 ms (the cloud SDKs' package initialisation), which was a tenth
// of a run against a remote bucket. A shell is single-threaded, so the
// parent-death signal set when it was forked holds through its execve of
// the handler. 126 is the status execTrampoline gives a directory it
// cannot enter.
const trampolineShell = `cd -P -- "$0" || exit 126; exec "$@"`

// shell is the shell handlerCommand uses; a variable for the test of the
// trampoline without one.
var shell = "/bin/sh"

// handlerCommand returns the command that starts prog (argv's program,
// resolved) with argv's arguments in dir. A chdir into the mount cannot
// happen between fork and exec (see execTrampoline), so the child
// changes directory itself: /bin/sh, else pugfs as the trampoline, with
// what that needs in Env (the caller adds the handler's environment).
func handlerCommand(dir, prog string, argv []string) (*exec.Cmd, error) {
	if fi, err := os.Stat(shell); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
		return exec.Command(shell, append([]string{"-c", trampolineShell, dir, prog}, argv[1:]...)...), nil
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, append([]string{prog}, argv[1:]...)...)
	cmd.Args[0] = argv[0]
	cmd.Env = []string{execChdirEnv + "=" + strconv.Itoa(os.Getpid()) + ":" + dir}
	return cmd, nil
}

// handlerPath resolves the handler's program as a shell would, from the
// directory pugfs exec was started in: ./handler.py is the caller's file,
// not one of the session's.
func handlerPath(name string) (string, error) {
	if strings.Contains(name, "/") {
		p, err := filepath.Abs(name)
		if err != nil {
			return "", err
		}
		// Checked here, or the shell that starts it reports a missing
		// one under the private mountpoint's name.
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s: %w", name, errors.Unwrap(err))
		}
		// So is one that cannot be run (review 38): EACCES, 126.
		if err := unix.Access(p, unix.X_OK); err != nil {
			return "", fmt.Errorf("%s: not executable: %w", name, err)
		}
		return p, nil
	}
	return exec.LookPath(name)
}

// runHandler runs the command in the session's directory of the mount and
// returns its exit status. SIGINT, SIGTERM and SIGHUP are passed on to it.
func runHandler(ctx context.Context, sio *stdio, cfg execConfig, mnt string, id layout.SessionID, version uint32) (int, error) {
	prog, err := handlerPath(cfg.argv[0])
	if err != nil {
		fmt.Fprintf(sio.err, "pugfs exec: %v (nothing committed)\n", err)
		if errors.Is(err, unix.EACCES) {
			return 126, nil // as a shell says of a file it cannot run
		}
		return 127, nil
	}
	cmd, err := handlerCommand(filepath.Join(mnt, "sessions", id.String()), prog, cfg.argv)
	if err != nil {
		return 0, err
	}
	cmd.Env = append(handlerEnv(os.Environ(), cfg.passCredentials,
		"PUGMARK_SESSION="+id.String(),
		"PUGMARK_VERSION="+strconv.FormatUint(uint64(version), 10),
		"PUGMARK_ROOT="+mnt), cmd.Env...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, sio.out, sio.err
	// The handler must not outlive pugfs exec: nothing it wrote could
	// land, and it would hold the mount.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	// SIGINT, SIGTERM and SIGHUP (they cancel ctx) go to the handler and to every
	// process under it, as a terminal's Ctrl-C reaches a whole foreground
	// job: a shell handler waiting for its child would otherwise wait it
	// out. A second one kills them: a handler that ignores the first
	// (trap '' TERM) kept pugfs exec running until a SIGKILL, which
	// leaves a supervisor nothing to clean up with. Counted from before
	// the start: a signal that came earlier (during the mount) starts no
	// handler at all.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, stopSignals...)
	defer signal.Stop(sigs)
	handlerStarting()
	if ctx.Err() != nil {
		fmt.Fprintf(sio.err, "pugfs exec: %s before the command started; nothing run, nothing committed\n", unix.SignalName(signalOf(ctx)))
		return 128 + int(signalOf(ctx)), nil
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("start %s: %w (nothing committed)", cfg.argv[0], err)
	}
	// A signal that came while the handler was being started may have
	// come before it existed: passed on whatever its origin (review C6).
	early := ctx.Err() != nil
	done := make(chan struct{})
	go quitTo(cmd.Process.Pid, cfg.quits, done)
	go func() {
		select {
		case <-ctx.Done():
			signalTree(cmd.Process.Pid, signalOf(ctx), !early && firstReachedGroup())
			fmt.Fprintf(sio.err, "pugfs exec: %s passed to the command; nothing will be committed; a second one kills it\n", unix.SignalName(signalOf(ctx)))
		case <-done:
			return
		}
		first := time.Now()
		for {
			select {
			case <-sigs:
				// One signal to the process group (a terminal's Ctrl-C,
				// kill -INT -PGID, a service manager stopping the
				// cgroup) comes here directly and again from the outer
				// pugfs exec, which passes on what it gets: counted as
				// a second one, it killed the handler before its trap
				// could clean up (review 38). Copies within sameSignal
				// of the first (the one that cancelled ctx) are it.
				if time.Since(first) < sameSignal {
					continue
				}
				signalTree(cmd.Process.Pid, syscall.SIGKILL, false)
				fmt.Fprintf(sio.err, "pugfs exec: second signal: the command and its processes are killed\n")
			case <-done:
				return
			}
		}
	}()
	err = cmd.Wait()
	close(done)
	code := statusOf(cmd.ProcessState, err)
	if ctx.Err() != nil {
		// Interrupted: nothing lands, whatever the handler exited with,
		// and the status says which signal (a supervisor tells an
		// interrupted run from a failed one by it).
		code = 128 + int(signalOf(ctx))
	}
	return code, nil
}

// sameSignal is how long after a signal that stops the handler another
// one still counts as the same (runHandler): the copies one signal to a
// process group makes arrive within milliseconds, a person's second
// Ctrl-C later.
const sameSignal = time.Second

// commitError is an error of pugfs exec's commit, after the command
// exited 0: a signal that came meanwhile was noted and changed nothing
// (noteSignals), so the status is not 128 + that signal (review 7).
type commitError struct{ error }

func (e *commitError) Unwrap() error { return e.error }

// noteSignals says on w, for each SIGINT, SIGTERM or SIGHUP that comes
// until stop is called, that it changes nothing: the run is committing
// its checkpoint.
func noteSignals(w io.Writer) (stop func()) {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, stopSignals...)
	done := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		for {
			select {
			case s := <-sigs:
				name := s.String()
				if n, ok := s.(syscall.Signal); ok {
					name = unix.SignalName(n)
				}
				fmt.Fprintf(w, "pugfs exec: %s ignored: the command has exited and its checkpoint is being committed; stopped now, whether it landed would be unknown (a SIGKILL leaves it so: then it did if the session's .pugmark/checkpoint is above PUGMARK_VERSION)\n", name)
			case <-done:
				return
			}
		}
	}()
	return func() {
		signal.Stop(sigs)
		close(done)
		<-ended
	}
}

// catchQuit makes SIGQUIT (Ctrl-\\) the handler's, as a terminal's is
// the foreground job's: pugfs exec passes it on (quitTo) and does not die
// of it. Go's own answer, a dump of every goroutine and exit status 2,
// said "usage error" to a supervisor, and in the inner process (PID 1 of
// its namespace) a SIGQUIT was lost and the run committed. It returns
// the channel the signals arrive on; main calls it in the inner process
// before it tells the outer one that signals are caught.
var catchQuit = sync.OnceValue(func() <-chan os.Signal {
	quits := make(chan os.Signal, 1)
	signal.Notify(quits, syscall.SIGQUIT)
	return quits
})

// quitTo passes each SIGQUIT from quits (whether it reached the
// process group directly: quitsReached) to process pid and every process
// under it until done is closed. The status is the handler's (131 when
// it dies of it), and a run that does not exit 0 lands nothing.
func quitTo(pid int, quits <-chan bool, done <-chan struct{}) {
	for {
		select {
		case group := <-quits:
			signalTree(pid, syscall.SIGQUIT, group)
		case <-done:
			return
		}
	}
}

// signalOf is the signal that cancelled ctx: signal.NotifyContext's
// cause names it ("interrupt signal received"); anything else counts as
// SIGTERM.
func signalOf(ctx context.Context) syscall.Signal {
	if c := context.Cause(ctx); c != nil {
		for _, s := range []syscall.Signal{syscall.SIGINT, syscall.SIGHUP} {
			if strings.HasPrefix(c.Error(), s.String()+" ") {
				return s
			}
		}
	}
	return syscall.SIGTERM
}

// handlerEnv is the handler's environment: env without the credential
// variables (unless pass), with PUGFS_EXEC_NAMESPACE dropped and extra
// set.
func handlerEnv(env []string, pass bool, extra ...string) []string {
	drop := map[string]bool{execInnerEnv: true, execChdirEnv: true, "PUGMARK_SESSION": true, "PUGMARK_VERSION": true, "PUGMARK_ROOT": true}
	out := make([]string, 0, len(env)+len(extra))
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if !drop[k] && (pass || !isCredentialEnv(k)) {
			out = append(out, kv)
		}
	}
	return append(out, extra...)
}
