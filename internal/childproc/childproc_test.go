package childproc

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestTail(t *testing.T) {
	for _, tc := range []struct {
		writes []string
		want   string
	}{
		{[]string{"ab", "cd"}, "abcd"},
		{[]string{"abc", "defgh"}, "[...]defgh"},
		{[]string{"abcdefghij"}, "[...]fghij"},
	} {
		tl := &Tail{Max: 5}
		for _, w := range tc.writes {
			if n, err := tl.Write([]byte(w)); n != len(w) || err != nil {
				t.Fatalf("Write(%q) = %d, %v", w, n, err)
			}
		}
		if got := tl.String(); got != tc.want {
			t.Errorf("%q: String() = %q, want %q", tc.writes, got, tc.want)
		}
	}
}

// TestKillGroup: KillGroup ends what the child started too, and Err
// reports the death.
func TestKillGroup(t *testing.T) {
	out := &Tail{Max: 100}
	cmd := exec.Command("sh", "-c", "sleep 100 & echo $!; wait")
	cmd.Stdout = out
	c, err := Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	var grandchild int
	for deadline := time.Now().Add(10 * time.Second); grandchild == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the child never printed its child's pid")
		}
		grandchild, _ = strconv.Atoi(strings.TrimSpace(out.String()))
	}
	c.KillGroup()
	if !c.Exited() || c.Err() == nil {
		t.Fatalf("after KillGroup: exited %v, err %v", c.Exited(), c.Err())
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		st, err := os.ReadFile("/proc/" + strconv.Itoa(grandchild) + "/stat")
		if err != nil || strings.Contains(string(st), ") Z ") {
			break // gone, or dead and waiting for init to reap it
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d outlived its group's SIGKILL", grandchild)
		}
	}
}
