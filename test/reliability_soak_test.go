package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pugmark/pugfs/layout"
)

// TestReliabilitySoak mixes readers, writers and backend faults on two
// mounts of one bucket for 10 s with a fixed fault seed (PUGFS_SOAK=1, as
// make soak sets: 75 s and a seed from the time, logged;
// PUGFS_SOAK_SEED=N replays one): transient errors on
// 5% of requests, 0-20 ms of latency, 10% of PUT responses lost, and 500
// ms stale listings, all inside the pugfs processes. Writers create (and
// sometimes remove) files in a shared session, readers cat and checksum
// seeded files and list the tree with ls -lR. At the end fsck finds no
// errors, every acknowledged write (close returned 0) is in the bucket
// with its bytes, every acknowledged removal is gone, no name was
// committed twice, no read returned wrong bytes, and both mounts are
// still up. The fault matrix (fault x operation x outcome) is logged.
//
// Removing any one protection of the fault tests (retries, transaction-ID
// resolution of lost PUTs, the stale-LIST floor of the session cache)
// shows here as EIO for writers or readers, a missing or duplicated
// commit, or fsck errors.
func TestReliabilitySoak(t *testing.T) {
	dur := 10 * time.Second
	if os.Getenv("PUGFS_SOAK") == "1" {
		dur = 75 * time.Second
	}
	seed := uint64(20261201) // CI is deterministic: random seeds are for make soak
	if os.Getenv("PUGFS_SOAK") == "1" {
		seed = uint64(time.Now().UnixNano())
	}
	if v := os.Getenv("PUGFS_SOAK_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("PUGFS_SOAK_SEED=%q: %v", v, err)
		}
		seed = n
	}
	t.Logf("soak %v, seed %d", dur, seed)
	bk := relLocalBucket(t)
	ro, rw := relSession(t, bk), relSession(t, bk)
	seeded := relSeedFiles(t, bk, ro, 24, seed)
	faults := map[string]string{
		"fault_error_rate": "0.05", "fault_jitter": "20ms", "fault_ops": "get,head,put,list",
		"fault_lost_put_rate": "0.1", "fault_stale": "500ms", "fault_seed": fmt.Sprint(seed),
	}
	mounts := []*Mount{
		mount(t, relWithFaults(bk, faults), "--metadata-ttl=200ms"),
		mount(t, relWithFaults(bk, faults), "--metadata-ttl=200ms"),
	}

	var mu sync.Mutex
	acked := map[string][]byte{} // name -> bytes, close returned 0
	removed := map[string]bool{} // acknowledged removals
	unsure := map[string]bool{}  // a removal whose result we do not know
	outcome := map[string]int{}  // "<op> <result>" -> count
	var lsErrs []string
	count := func(op string, err error) {
		r := "ok"
		if err != nil {
			var e syscall.Errno
			if errors.As(err, &e) {
				r = e.Error()
			} else {
				r = "error"
			}
		}
		mu.Lock()
		outcome[op+" "+r]++
		mu.Unlock()
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for mi, m := range mounts {
		sd := filepath.Join(m.Dir, "sessions", rw.String())
		for g := 0; g < 2; g++ {
			wg.Add(1)
			go func(tag string, rng *rand.Rand) {
				defer wg.Done()
				var mine []string
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					if len(mine) > 3 && rng.IntN(10) == 0 {
						k := rng.IntN(len(mine))
						name := mine[k]
						mine = append(mine[:k], mine[k+1:]...)
						err := os.Remove(filepath.Join(sd, name))
						count("rm", err)
						mu.Lock()
						if err == nil {
							removed[name] = true
						} else {
							unsure[name] = true
						}
						mu.Unlock()
						continue
					}
					name := fmt.Sprintf("%s-%04d.bin", tag, i)
					body := make([]byte, []int{50, 1500, 40 << 10, 200 << 10}[rng.IntN(4)])
					for j := range body {
						body[j] = byte(rng.Uint32())
					}
					err := os.WriteFile(filepath.Join(sd, name), body, 0o644)
					count("write+close", err)
					if err == nil {
						mu.Lock()
						acked[name] = body
						mu.Unlock()
						mine = append(mine, name)
					}
				}
			}(fmt.Sprintf("m%dw%d", mi, g), rand.New(rand.NewPCG(seed, uint64(mi*10+g))))
		}
		wg.Add(2)
		go func(rng *rand.Rand) { // Go reader: every seeded file, bytes compared
			defer wg.Done()
			names := make([]string, 0, len(seeded))
			for n := range seeded {
				names = append(names, n)
			}
			sort.Strings(names)
			for {
				select {
				case <-stop:
					return
				default:
				}
				n := names[rng.IntN(len(names))]
				got, err := os.ReadFile(filepath.Join(m.Dir, "sessions", ro.String(), n))
				if err == nil && string(got) != seeded[n] {
					count("read", errors.New("wrong bytes"))
					mu.Lock()
					outcome["read WRONG BYTES"]++
					mu.Unlock()
					continue
				}
				count("read", err)
			}
		}(rand.New(rand.NewPCG(seed, uint64(100+mi))))
		go func() { // shell tools: ls -lR of the written session, sha256sum of the seeded one
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, e, err := run(m.Dir, "ls -lR sessions/"+rw.String()+" >/dev/null")
				if err != nil && strings.Contains(e, "No such file") {
					// A writer removed a file between readdir and lstat:
					// not a fault.
					err = nil
				} else if err != nil {
					mu.Lock()
					lsErrs = append(lsErrs, e)
					mu.Unlock()
				}
				count("ls -lR", err)
				out, _, err := run(m.Dir, "cat sessions/"+ro.String()+"/d1/f01.txt | sha256sum")
				sum := sha256.Sum256([]byte(seeded["d1/f01.txt"]))
				if err == nil && !strings.HasPrefix(out, hex.EncodeToString(sum[:])) {
					mu.Lock()
					outcome["cat|sha256sum WRONG BYTES"]++
					mu.Unlock()
				}
				count("cat|sha256sum", err)
			}
		}()
	}
	deadline := time.After(dur)
	tick := time.NewTicker(500 * time.Millisecond)
	for running := true; running; {
		select {
		case <-deadline:
			running = false
		case <-tick.C:
			for _, m := range mounts {
				if !relAlive(m) || !isMounted(m.Dir) {
					close(stop)
					wg.Wait()
					t.Fatalf("a mount died during the soak:\n%s", m.Log())
				}
			}
		}
	}
	tick.Stop()
	close(stop)
	wg.Wait()

	stats := []relMountStats{relReadStats(t, mounts[0]), relReadStats(t, mounts[1])}
	for _, m := range mounts {
		if !relAlive(m) {
			t.Fatalf("a mount died:\n%s", m.Log())
		}
	}
	for i, m := range mounts {
		m.Stop(t)
		for _, l := range strings.Split(m.Log(), "\n") {
			if strings.Contains(l, "level=ERROR") {
				t.Logf("mount %d: %s", i, l)
			}
		}
	}
	for _, e := range lsErrs {
		t.Logf("ls -lR: %s", e)
	}
	rep := relFsckClean(t, bk)

	// Every acknowledged write is there with its bytes; every
	// acknowledged removal is gone; nothing was committed twice.
	ctx := context.Background()
	v, err := bk.Store.LatestVersion(ctx, rw)
	if err != nil {
		t.Fatal(err)
	}
	log, err := bk.Store.FullLog(ctx, rw, v)
	if err != nil {
		t.Fatal(err)
	}
	slots := layout.Slots(log)
	creates := map[string]int{}
	for _, e := range log {
		if !e.Deleted {
			creates[e.Name]++
		}
	}
	dups := 0
	for n, c := range creates {
		if c > 1 {
			dups++
			t.Errorf("%s committed %d times", n, c)
		}
	}
	missing := 0
	for name, body := range acked {
		if removed[name] || unsure[name] {
			continue
		}
		e, ok := slots[name]
		if !ok {
			missing++
			t.Errorf("acknowledged write %s is not in the bucket", name)
			continue
		}
		if !bytes.Equal(relSlotBody(t, bk, e), body) {
			t.Errorf("acknowledged write %s has other bytes in the bucket", name)
		}
	}
	for name := range removed {
		if _, ok := slots[name]; ok {
			t.Errorf("acknowledged removal of %s: still in the bucket", name)
		}
	}
	for k, n := range outcome {
		if strings.Contains(k, "WRONG") && n > 0 {
			t.Errorf("%s: %d", k, n)
		}
	}
	if len(acked) < 20 {
		t.Errorf("only %d writes acknowledged in %v: the soak did too little", len(acked), dur)
	}

	// The fault matrix.
	var b strings.Builder
	sum := func(op string, f func(relFaultCounts) int64) int64 {
		return f(stats[0].Faults[op]) + f(stats[1].Faults[op])
	}
	errs := func(c relFaultCounts) int64 { return c.Errors }
	lost := func(c relFaultCounts) int64 { return c.Lost }
	delayed := func(c relFaultCounts) int64 { return c.Delayed }
	reqs := func(c relFaultCounts) int64 { return c.Requests }
	fmt.Fprintf(&b, "FAULT MATRIX: soak %v, 2 mounts, seed %d\n", dur, seed)
	fmt.Fprintf(&b, "| fault | GET | HEAD | PUT | LIST | outcome |\n|---|---|---|---|---|---|\n")
	fmt.Fprintf(&b, "| requests seen | %d | %d | %d | %d | |\n", sum("get", reqs), sum("head", reqs), sum("put", reqs), sum("list", reqs))
	fmt.Fprintf(&b, "| transient error (Internal, p=0.05) | %d | %d | %d | %d | retried with backoff: %d retries; %d store errors after retries (interrupted requests included), none seen by a tool |\n",
		sum("get", errs), sum("head", errs), sum("put", errs), sum("list", errs), stats[0].Retries+stats[1].Retries, stats[0].Errors+stats[1].Errors)
	fmt.Fprintf(&b, "| latency 0-20 ms | %d | %d | %d | %d | absorbed; no timeouts |\n",
		sum("get", delayed), sum("head", delayed), sum("put", delayed), sum("list", delayed))
	fmt.Fprintf(&b, "| lost PUT response (p=0.1) | - | - | %d | - | resolved by transaction ID / content address: %d duplicated, %d lost commits |\n",
		sum("put", lost), dups, missing)
	fmt.Fprintf(&b, "| stale LIST (500 ms) | - | - | - | %d hidden, %d ghost keys | %d lost, %d duplicated commits; own writes visible |\n",
		stats[0].Hidden+stats[1].Hidden, stats[0].Ghosts+stats[1].Ghosts, missing, dups)
	keys := make([]string, 0, len(outcome))
	for k := range outcome {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	fmt.Fprintf(&b, "filesystem operations (op result: count):")
	for _, k := range keys {
		fmt.Fprintf(&b, " [%s: %d]", k, outcome[k])
	}
	fmt.Fprintf(&b, "\ncommits: %d+%d snapshots, commit errors %d+%d; acknowledged writes %d (all present), removals %d (all gone); fsck errors %d, warnings %d; mounts up throughout\n",
		stats[0].Snapshots, stats[1].Snapshots, stats[0].CommitErrors, stats[1].CommitErrors, len(acked), len(removed), rep.Errors, rep.Warnings)
	t.Log("\n" + b.String())
}
