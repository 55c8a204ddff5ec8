package layout

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"
)

// The zstd decoders are pooled (codec.go): a decoder that failed in the
// middle of a stream, or that decoded a large body, must leave nothing
// behind for the next user, also when many decode at once.
func TestZstdDecoderPoolReuse(t *testing.T) {
	small := bytes.Repeat([]byte("pugmark "), 1000)
	large := bytes.Repeat([]byte("0123456789abcdef"), 100_000) // 1.6 MB: closed, not pooled
	zSmall, zLarge := encoder().EncodeAll(small, nil), encoder().EncodeAll(large, nil)
	broken := append([]byte(nil), zSmall[:len(zSmall)/2]...)

	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				var body, want []byte
				switch (g + i) % 3 {
				case 0:
					body, want = zSmall, small
				case 1:
					body, want = zLarge, large
				default:
					if _, err := DecodeBody(broken, EncodingZstd, 1<<30); err == nil {
						errs <- fmt.Errorf("a truncated zstd body decoded")
					}
					continue
				}
				got, err := DecodeBody(body, EncodingZstd, 1<<30)
				if err != nil || !bytes.Equal(got, want) {
					errs <- fmt.Errorf("decode %d bytes: got %d bytes, %v", len(want), len(got), err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// A stream read after Close fails rather than reading a decoder that
	// is back in the pool (and maybe someone else's).
	r, err := NewDecoder(bytes.NewReader(zSmall), EncodingZstd)
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
	if _, err := io.ReadAll(r); err == nil {
		t.Error("read after Close succeeded")
	}
}

// TestSkippableFrameFirst: a zstd stream may start with a skippable frame
// (RFC 8878 §3.1.2), and §6.2 has any conformant stream accepted; a
// snapshot so encoded decoded as raw JSON ("invalid character 'P'") and
// its session was EIO (the conformance audit).
func TestSkippableFrameFirst(t *testing.T) {
	ds := []Descriptor{desc("a", "x")}
	body, err := EncodeDescriptors(ds)
	if err != nil {
		t.Fatal(err)
	}
	skip := []byte{0x50, 0x2a, 0x4d, 0x18, 4, 0, 0, 0, 'p', 'u', 'g', '!'}
	withSkip := append(append([]byte(nil), skip...), body...)
	if got := Sniff(withSkip); got != EncodingZstd {
		t.Fatalf("Sniff = %q, want zstd", got)
	}
	for _, enc := range []string{EncodingNone, EncodingZstd} {
		got, err := DecodeDescriptors(withSkip, enc, 1<<20)
		if err != nil || len(got) != 1 || got[0].Name != "a" {
			t.Errorf("declared %q: %+v, %v", enc, got, err)
		}
	}
}

// TestEncodeDescriptorsStreamed: a snapshot of more than streamFrom
// descriptors is compressed as its JSON is written (encodeStream); the
// JSON is the same as for a short one, byte for byte, and a descriptor
// that cannot be written fails the whole body.
func TestEncodeDescriptorsStreamed(t *testing.T) {
	for _, n := range []int{0, 1, streamFrom, streamFrom + 1, 5000} {
		ds := make([]Descriptor, n)
		for i := range ds {
			d := fullDescriptor()
			d.Name = fmt.Sprintf("dir/ünïcode <&> %d", i)
			d.Data = bytes.Repeat([]byte{byte(i)}, i%1100)
			d.Digest, d.Size = DigestOf(d.Data), int64(len(d.Data))
			d.SequenceNumber = int64(i + 1)
			ds[i] = d
		}
		body, err := EncodeDescriptors(ds)
		if err != nil {
			t.Fatalf("%d descriptors: %v", n, err)
		}
		plain, err := DecodeBody(body, EncodingZstd, 1<<30)
		if err != nil {
			t.Fatalf("%d descriptors: %v", n, err)
		}
		want, err := json.Marshal(append([]Descriptor{}, ds...))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(plain, want) {
			t.Fatalf("%d descriptors: the JSON differs from json.Marshal's (%d bytes against %d)", n, len(plain), len(want))
		}
		got, err := DecodeDescriptors(body, EncodingZstd, 1<<30)
		if err != nil || len(got) != n || (n > 0 && (got[n-1].Name != ds[n-1].Name || !bytes.Equal(got[n-1].Data, ds[n-1].Data))) {
			t.Fatalf("%d descriptors decoded as %d (%v)", n, len(got), err)
		}
	}
	bad := make([]Descriptor, streamFrom+1)
	bad[streamFrom].CreatedAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := EncodeDescriptors(bad); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a descriptor with created-at in year 10000: %v, want ErrInvalid", err)
	}
}
