package main

import (
	"os"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Where a signal of pugfs exec's inner process came from. A terminal's
// Ctrl-C or Ctrl-\ (SIGINT, SIGQUIT) goes to the whole foreground
// process group: pugfs exec, its inner process and the handler at once.
// Passed on again by pugfs exec, the handler got it twice: a sh trap ran
// twice, and Python's second KeyboardInterrupt cut the first one's
// cleanup short. Go's os/signal does not say who sent a signal
// (siginfo), and even siginfo does not tell kill(-pgid) from kill(pid),
// so the inner process goes by what reached it, and by the kind: the
// outer process passes what it gets on a pipe rather than as a signal,
// and a SIGINT or SIGQUIT that the inner process also got directly came
// to the group (the outer process's notice of it is the same signal) and
// is not sent to the handler's group again. A SIGTERM or SIGHUP the
// inner process got directly is passed on all the same (once, with the
// outer's notice of it dropped): `pkill pugfs` and a service manager
// signal pugfs's processes, not the handler, which then never learnt of
// it (review C1), while one to the whole group is rarer and costs a
// second copy. A notice with no copy beside it came to pugfs exec alone:
// the inner process raises it in itself, so that all that waits for a
// signal (the run's context, the second-signal count, the commit's
// notes) sees it, and passes it on.

// execForwardFD is the inner process's end of a third pipe, on which the
// outer process passes on each signal it gets: one byte, its number.
const execForwardFD = 5

// sameDelivery is how long the notice of a SIGINT or SIGQUIT waits for
// a copy of its own once the handler runs: both come within a
// millisecond of the signal, a copy received directly first (the usual
// order) drops a notice that comes within sameSignal after it.
const sameDelivery = 100 * time.Millisecond

// groupKind reports whether sig is a kind a terminal sends to its
// foreground process group (Ctrl-C, Ctrl-\): one the inner process got
// directly reached the handler too.
func groupKind(sig syscall.Signal) bool { return sig == syscall.SIGINT || sig == syscall.SIGQUIT }

// origins is what the inner process learnt of its signals' origins.
var origins = struct {
	known chan struct{} // closed once firstGroup is set
	once  sync.Once     // closes known
	// firstGroup: the first SIGINT, SIGTERM or SIGHUP was a SIGINT that
	// reached the process group directly (and with it the handler).
	firstGroup atomic.Bool
	// quits has a value for each SIGQUIT: whether it reached the group.
	quits chan bool
	// starting is set once the run is about to start its handler
	// (handlerStarting): until then no handler has a signal, whatever
	// its origin, so a notice need not wait for its copy.
	starting atomic.Bool
}{known: make(chan struct{}), quits: make(chan bool, 4)}

// handlerStarting says, in the inner process, that the run is about to
// start its handler: from now on a notice of a stop signal waits
// sameDelivery for a copy of its own (sortSignals). Before, it is raised
// at once: held back, it let a handler whose mount ended meanwhile be
// started after the signal (runHandler starts none after one).
func handlerStarting() { origins.starting.Store(true) }

// noteOrigin records where the first stop signal came from.
func noteOrigin(group bool) {
	origins.once.Do(func() {
		origins.firstGroup.Store(group)
		close(origins.known)
	})
}

// firstReachedGroup reports whether the signal that stopped the run
// reached the handler's process group directly, so that it must not be
// sent to that group again. Only the inner process can tell; the process
// that runs the handler itself (pugfs exec without namespaces) passes
// every signal on, as the handler may not have had it.
func firstReachedGroup() bool {
	if !execInner {
		return false
	}
	select {
	case <-origins.known:
	case <-time.After(sameDelivery):
		// The signal is being classified (or came before the forwarder
		// ran): passing it on is the safe side.
	}
	return origins.firstGroup.Load()
}

// quitsReached returns the SIGQUITs the handler is to get, each with
// whether it reached the handler's group directly: in the inner
// process, those forwardSignals sorts; elsewhere every one of quits, as
// sent to pugfs exec alone.
func quitsReached(quits <-chan os.Signal) <-chan bool {
	if execInner {
		return origins.quits
	}
	out := make(chan bool, 4)
	go func() {
		for range quits {
			out <- false
		}
	}()
	return out
}

// forwardSignals starts sorting the inner process's signals by origin,
// until the process ends: those it gets directly, and the outer
// process's notices on execForwardFD, raised here when no signal of
// their kind came directly within sameDelivery. It is called before the
// outer process is told that signals are caught (signalsCaught).
func forwardSignals() {
	direct := make(chan os.Signal, 8)
	signal.Notify(direct, append(stopSignals, syscall.SIGQUIT)...)
	passed := make(chan syscall.Signal, 8)
	go readPassed(passed)
	go sortSignals(direct, passed)
}

// sortSignals is forwardSignals' loop.
func sortSignals(direct <-chan os.Signal, passed <-chan syscall.Signal) {
	due := make(chan syscall.Signal, 8)
	var (
		raised  = map[syscall.Signal]int{}       // raised here, not received yet
		waiting = map[syscall.Signal]int{}       // notices waiting for their signal
		last    = map[syscall.Signal]time.Time{} // when each kind last came directly
	)
	raise := func(sig syscall.Signal) {
		raised[sig]++
		if sig != syscall.SIGQUIT {
			noteOrigin(false) // before the context sees it
		}
		_ = syscall.Kill(os.Getpid(), sig)
	}
	for {
		select {
		case s := <-direct:
			sig, _ := s.(syscall.Signal)
			group := raised[sig] == 0
			if group {
				last[sig] = time.Now()
				if waiting[sig] > 0 {
					waiting[sig]-- // its notice: the same signal
				}
			} else {
				raised[sig]--
			}
			group = group && groupKind(sig)
			if sig == syscall.SIGQUIT {
				select {
				case origins.quits <- group:
				default:
				}
			} else {
				noteOrigin(group)
			}
		case sig := <-passed:
			if time.Since(last[sig]) < sameSignal {
				continue // came directly: the same signal, sorted then
			}
			if !groupKind(sig) || (sig != syscall.SIGQUIT && !origins.starting.Load()) {
				// Passed on whatever its origin, or no handler yet to
				// have had it: the run must see it now, before it
				// starts one (handlerStarting).
				raise(sig)
				continue
			}
			waiting[sig]++
			time.AfterFunc(sameDelivery, func() { due <- sig })
		case sig := <-due:
			if waiting[sig] == 0 {
				continue // its signal came directly meanwhile
			}
			waiting[sig]--
			raise(sig)
		}
	}
}

// readPassed sends each signal the outer process passes on to passed,
// until the pipe closes.
func readPassed(passed chan<- syscall.Signal) {
	var b [1]byte
	for {
		n, err := unix.Read(execForwardFD, b[:])
		if err == unix.EINTR {
			continue
		}
		if n != 1 || err != nil {
			return
		}
		passed <- syscall.Signal(b[0])
	}
}

// passSignal is the outer process's half: it tells the inner process,
// through w (the write end of the pipe at execForwardFD), of signal s.
func passSignal(w *os.File, s os.Signal) {
	if sig, ok := s.(syscall.Signal); ok && sig > 0 && sig < 256 {
		_, _ = w.Write([]byte{byte(sig)}) // fails only once the inner process is gone
	}
}

// signalTree sends sig to pid and to every process under it; with
// reached, not to those of this process's own process group, which the
// signal reached already (a group delivery).
func signalTree(pid int, sig syscall.Signal, reached bool) {
	if !reached {
		_ = syscall.Kill(pid, sig)
	} else if g, err := syscall.Getpgid(pid); err == nil && g != syscall.Getpgrp() {
		_ = syscall.Kill(pid, sig)
	}
	for _, c := range childrenOf(strconv.Itoa(pid)) {
		signalTree(c, sig, reached)
	}
}
