package goroutines

import (
	"testing"
	"time"
)

func parkedInSelect(stop, other chan struct{}) {
	select {
	case <-stop:
	case <-other:
	}
}

// TestWaiting counts a goroutine parked in a select of a named function,
// and no longer once it has left.
func TestWaiting(t *testing.T) {
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { parkedInSelect(stop, nil); close(done) }()
	for deadline := time.Now().Add(10 * time.Second); Waiting("[select", "parkedInSelect") != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the parked goroutine was never counted")
		}
	}
	close(stop)
	<-done
	if n := Waiting("[select", "parkedInSelect"); n != 0 {
		t.Fatalf("%d goroutines still counted after leaving", n)
	}
}
