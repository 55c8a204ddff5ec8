package fs

import (
	"fmt"
	"os"
	"strconv"
)

// mountReadAheadKB is the kernel read-ahead pugfs wants for its files: the
// MaxReadAhead it asks for in FUSE_INIT, so that a sequential reader's
// READs are as large as the mount takes (maxRead, 1016 KiB), one round
// trip to pugfs each; a window of 1 MiB came as one READ of 1016 KiB and
// one of 8 KiB.
const mountReadAheadKB = maxRead >> 10

// raiseReadAhead sets the kernel's read-ahead for the mount of device
// dev ("major:minor", its backing device's name in sysfs) to kb KiB.
// Asking in FUSE_INIT is not enough: the kernel takes the smaller
// of that and the FUSE backing device's own setting, 128 KiB, so a cold
// cat reached pugfs as 128 KiB READs. The device's setting is root's to
// change, in sysfs (gcsfuse's max-read-ahead-kb does the same). Serving a
// verified 512 MiB blob from its disk copy took 0.16-0.17 s at 128 KiB
// and 0.13-0.14 s at 1 MiB; 8 MiB gained nothing more.
func raiseReadAhead(dev string, kb int) error {
	p := "/sys/class/bdi/" + dev + "/read_ahead_kb"
	if err := os.WriteFile(p, []byte(strconv.Itoa(kb)), 0); err != nil {
		return fmt.Errorf("set the kernel's read-ahead: %w", err)
	}
	return nil
}
