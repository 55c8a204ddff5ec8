package fs

import (
	"context"
	"testing"
)

// TestPassthroughBusyWaitsForRelease: an open that the passthrough
// readers of a file would refuse waits for a RELEASE still on its way
// (the reader closed, the kernel has not told pugfs yet), and refuses
// when a reader stays or the open is interrupted.
func TestPassthroughBusyWaitsForRelease(t *testing.T) {
	var st ptState
	if st.busy(context.Background()) {
		t.Fatal("a file never opened through passthrough is busy")
	}

	st.opened()
	st.opened()
	waiting := make(chan bool)
	go func() { waiting <- st.busy(context.Background()) }()
	st.released()
	st.released()
	if <-waiting {
		t.Error("busy after its last reader's RELEASE arrived")
	}

	st.opened()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if !st.busy(ctx) {
		t.Error("an interrupted open found a file with a reader not busy")
	}
	if !st.busy(context.Background()) {
		t.Error("a reader that stays past releaseWait left the file not busy")
	}
	st.released()
	if st.busy(context.Background()) {
		t.Error("busy with no reader left")
	}
}
