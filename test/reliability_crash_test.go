package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pugmark/pugfs/layout"
)

// Crashes: pugfs killed with SIGKILL in the middle of a write storm, at
// points widened with injected latency, then mounted again on the same
// directory and cache directory.

// relStorm is a write storm: it writes files into a session from several goroutines until stop
// is closed or a write fails (the mount died), and records what was
// acknowledged: close(2) returned 0.
type relStorm struct {
	mu    sync.Mutex
	acked map[string][]byte
	wg    sync.WaitGroup
	stop  chan struct{}
	dirfd int
}

func relStartStorm(dir, tag string, writers int, seed uint64) (*relStorm, error) {
	// Every write goes through a descriptor of the session directory
	// opened now: once the mount is killed and detached, a path would
	// reach the plain directory underneath and "succeed" there.
	dirfd, err := syscall.Open(dir, syscall.O_DIRECTORY|syscall.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	s := &relStorm{acked: map[string][]byte{}, stop: make(chan struct{}), dirfd: dirfd}
	for g := 0; g < writers; g++ {
		s.wg.Add(1)
		go func(g int) {
			defer s.wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(g)))
			sub := fmt.Sprintf("%s-w%d", tag, g)
			if err := syscall.Mkdirat(dirfd, sub, 0o755); err != nil && err != syscall.EEXIST {
				return
			}
			for i := 0; ; i++ {
				select {
				case <-s.stop:
					return
				default:
				}
				name := fmt.Sprintf("%s/f%03d.bin", sub, i)
				body := make([]byte, []int{100, 2000, 50 << 10, 300 << 10}[rng.IntN(4)])
				for j := range body {
					body[j] = byte(rng.Uint32())
				}
				if err := relWriteAt(dirfd, name, body); err != nil {
					return // the mount is gone; this write was not acknowledged
				}
				s.mu.Lock()
				s.acked[name] = body
				s.mu.Unlock()
			}
		}(g)
	}
	return s, nil
}

// relWriteAt creates name under dirfd with body; nil means close(2)
// returned 0, the acknowledgement of a commit.
func relWriteAt(dirfd int, name string, body []byte) error {
	fd, err := syscall.Openat(dirfd, name, syscall.O_CREAT|syscall.O_WRONLY|syscall.O_TRUNC|syscall.O_CLOEXEC, 0o644)
	if err != nil {
		return err
	}
	for len(body) > 0 {
		n, err := syscall.Write(fd, body)
		if err != nil {
			syscall.Close(fd)
			return err
		}
		body = body[n:]
	}
	return syscall.Close(fd)
}

func (s *relStorm) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.acked)
}

func (s *relStorm) end() map[string][]byte {
	close(s.stop)
	s.wg.Wait()
	syscall.Close(s.dirfd)
	return s.acked
}

// TestReliabilityCrashDuringWriteStorm kills pugfs with SIGKILL at four
// points of a write relStorm and mounts again: mid-relStorm at a random moment,
// while blob uploads hang (data staged, blob not stored), while snapshot
// PUTs hang (blob stored, snapshot not), and with slow snapshot PUTs
// mid-flight. After each crash the remount on the same directory and cache
// directory works, fsck finds no errors (nothing committed half: no
// snapshot names a missing blob, no sequence gap), every acknowledged
// write is in the bucket with its bytes, and the dead mount's staging
// directory is gone.
//
// Removing the protections: committing the snapshot before the blob (or
// acknowledging a close before its snapshot PUT returned) leaves fsck
// errors or acknowledged writes missing; dropping the dead-pid clean-up
// in cmd/pugfs leaves staging/<pid> behind.
func TestReliabilityCrashDuringWriteStorm(t *testing.T) {
	bk := relLocalBucket(t)
	id := relSession(t, bk)
	snaps, _ := layout.SnapshotsPrefix(id)
	seed := uint64(20261201) // CI is deterministic: random seeds are for make soak
	if os.Getenv("PUGFS_SOAK") == "1" {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	points := []struct {
		name   string
		faults map[string]string
		op     string // the request kind whose delay marks the window
	}{
		{"random moment", nil, ""},
		{"blob upload hangs", map[string]string{"fault_prefix": layout.ObjectsPrefix, "fault_ops": "put", "fault_latency": "3s"}, "put"},
		{"snapshot PUT hangs", map[string]string{"fault_prefix": snaps, "fault_ops": "put", "fault_latency": "3s"}, "put"},
		{"slow snapshot PUTs", map[string]string{"fault_prefix": snaps, "fault_ops": "put", "fault_latency": "150ms", "fault_jitter": "100ms"}, "put"},
	}
	cache := t.TempDir()
	dir := t.TempDir()
	want := map[string][]byte{}
	for i, p := range points {
		t.Run(strings.ReplaceAll(p.name, " ", "_"), func(t *testing.T) {
			b := bk
			if p.faults != nil {
				b = relWithFaults(bk, p.faults)
			}
			m := relMountOn(t, b, dir, "--cache-dir", cache)
			sd := filepath.Join(dir, "sessions", id.String())
			s, err := relStartStorm(sd, fmt.Sprintf("p%d", i), 3, seed+uint64(i))
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case p.op == "":
				time.Sleep(time.Duration(200+rng.IntN(800)) * time.Millisecond) // a random point, not a synchronisation
			case p.name == "slow snapshot PUTs":
				relWait(t, 30*time.Second, "some writes acknowledged", func() bool { return s.count() >= 3 })
				time.Sleep(time.Duration(rng.IntN(250)) * time.Millisecond) // a random point inside or between PUTs
			default:
				relWait(t, 30*time.Second, "a request inside the widened window", func() bool {
					return relReadStats(t, m).Faults[p.op].Delayed > 0
				})
			}
			pid := relPID(m)
			m.Kill()
			for k, v := range s.end() {
				want[k] = v
			}
			t.Logf("%s: killed pid %d with %d writes acknowledged so far", p.name, pid, len(want))

			m = relMountOn(t, bk, dir, "--cache-dir", cache)
			// The new mount's staging directory is the only one left
			// (with its lock file): the dead mount's was removed.
			// (The fault injector's URL is another bucket's: its
			// directories are swept all the same.)
			if ents, _ := filepath.Glob(filepath.Join(cache, "buckets", "*", "staging", "*")); len(ents) != 2 {
				t.Errorf("the staging directories after a remount: %v, want the new mount's alone", ents)
			}
			relFsckClean(t, bk)
			slots := relLiveSlots(t, bk, id)
			for name, body := range want {
				e, ok := slots[name]
				if !ok {
					t.Fatalf("acknowledged write %s is not in the bucket", name)
				}
				if got := relSlotBody(t, bk, e); !bytes.Equal(got, body) {
					t.Fatalf("acknowledged write %s has other bytes in the bucket", name)
				}
			}
			// And through the new mount.
			for name, body := range want {
				got, err := os.ReadFile(filepath.Join(sd, name))
				if err != nil || !bytes.Equal(got, body) {
					t.Fatalf("read %s through the new mount: %v", name, err)
				}
				break
			}
			m.Stop(t)
		})
	}
	if len(want) == 0 {
		t.Fatal("no write was ever acknowledged: the relStorm tested nothing")
	}
}

// TestReliabilityStaleMountpointReused: a pugfs killed without anyone
// detaching its mount leaves the mountpoint dead (ENOTCONN). Mounting
// again on it detects the stale mount, says so, detaches it, and serves;
// the files written before the crash are there.
//
// Removing the protection (checkMountpoint's ENOTCONN branch in
// cmd/pugfs/mount.go) makes the second mount fail with "transport endpoint
// is not connected".
func TestReliabilityStaleMountpointReused(t *testing.T) {
	bk := relLocalBucket(t)
	id := relSession(t, bk)
	dir := t.TempDir()
	m := startMount(t, bk, dir)
	sh(t, dir, "echo before > sessions/"+id.String()+"/a.txt")
	m.KillHard()
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	// A name never looked up, so the kernel must ask the dead daemon.
	if _, err := os.Stat(filepath.Join(dir, "never-looked-up")); !errors.Is(err, syscall.ENOTCONN) {
		t.Fatalf("stat of a dead mount: %v, want ENOTCONN", err)
	}
	m2 := relMountOn(t, bk, dir)
	// The dead mount's entry in mountinfo satisfies the harness's wait;
	// wait for the new server itself.
	relWait(t, 30*time.Second, "the new mount serves", func() bool { return strings.Contains(m2.Log(), "msg=mounted") })
	if !strings.Contains(m2.Log(), "stale mount") {
		t.Errorf("no clear message about the stale mount:\n%s", m2.Log())
	}
	if got := sh(t, dir, "cat sessions/"+id.String()+"/a.txt"); got != "before\n" {
		t.Fatalf("after remount: %q", got)
	}
	sh(t, dir, "echo after > sessions/"+id.String()+"/b.txt")
	if e, ok := relLiveSlots(t, bk, id)["b.txt"]; !ok || string(e.Data) != "after\n" {
		t.Fatalf("write after remount: %+v", e)
	}
}
