package layout

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/klauspost/compress/zstd"
)

// Decoding a snapshot costs memory bounded by the decode limit, whatever
// the snapshot says: the JSON text is streamed, never held whole, and the
// number of descriptors is bounded too.
//
// Without the streaming decode (io.ReadAll then json.Unmarshal), the
// whitespace bomb allocates the whole limit and the empty-descriptor bomb
// allocates 240 bytes per "{}," (60 million of them: 14 GB), so both
// checks below fail (the second by running out of memory).
func TestReliabilityDecodeBombsBounded(t *testing.T) {
	const limit = 64 << 20
	stream := func(fill func(w *bufio.Writer)) []byte {
		var out bytes.Buffer
		zw, _ := zstd.NewWriter(&out, zstd.WithEncoderLevel(zstd.SpeedBestCompression))
		bw := bufio.NewWriterSize(zw, 1<<20)
		fill(bw)
		bw.Flush()
		zw.Close()
		return out.Bytes()
	}
	for _, tc := range []struct {
		name     string
		body     []byte
		maxAlloc uint64
	}{
		{"60 million empty descriptors", stream(func(w *bufio.Writer) {
			w.WriteString("[{}")
			for i := 0; i < 60<<20; i++ {
				w.WriteString(",{}")
			}
			w.WriteString("]")
		}), 1 << 30}, // allocated in all, garbage included; 14 GB unbounded
		{"whitespace inside the array", stream(func(w *bufio.Writer) {
			w.WriteString("[")
			w.Write(bytes.Repeat([]byte(" "), 200<<20))
			w.WriteString("]")
		}), 16 << 20},
	} {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		_, err := DecodeDescriptors(tc.body, EncodingZstd, limit)
		runtime.ReadMemStats(&after)
		wantErrIs(t, err, ErrTooLarge)
		alloc := after.TotalAlloc - before.TotalAlloc
		t.Logf("%s (%d bytes stored): allocated %d MiB", tc.name, len(tc.body), alloc>>20)
		if alloc > tc.maxAlloc {
			t.Errorf("%s: decoding allocated %d MiB, want <= %d MiB", tc.name, alloc>>20, tc.maxAlloc>>20)
		}
	}
	// Within the bound, many small descriptors still decode.
	var js bytes.Buffer
	js.WriteString(`[{"name":"a","sequence-number":1}`)
	for i := 2; i <= 1000; i++ {
		js.WriteString(`,{"name":"a","sequence-number":2}`)
	}
	js.WriteString("]")
	if ds, err := DecodeDescriptors(js.Bytes(), "", limit); err != nil || len(ds) != 1000 {
		t.Fatalf("1000 descriptors: %d, %v", len(ds), err)
	}
}

// FuzzReliabilityStreamedDecode: the streamed decoder (with whitespace
// squeezed outside strings) accepts exactly what json.Unmarshal of the
// whole array accepts, with the same descriptors. A squeeze that touched
// whitespace inside a string, or an element-wise decode that let trailing
// garbage through, shows up here as a difference.
func FuzzReliabilityStreamedDecode(f *testing.F) {
	for _, s := range []string{`[]`, ` [ ] `, `null`, `[null]`, `[{"name":"a  b\t\"  c"}]`, `[{"name":"a"}] x`,
		`[{"name":"a","metadata":{"k":"  v  "}},{"deleted":true}]`, "[\n\t{\"name\" : \"\\\\\"  }\r\n]", `[1]`, `{}`, `[{}]   `} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if Sniff(body) != EncodingNone {
			return
		}
		got, err := DecodeDescriptors(body, EncodingNone, 1<<20)
		var want []Descriptor
		werr := json.Unmarshal(body, &want)
		if werr == nil && want == nil {
			werr = errors.New("null") // not an array
		}
		if (err == nil) != (werr == nil) {
			t.Fatalf("DecodeDescriptors(%q) error %v, json.Unmarshal error %v", body, err, werr)
		}
		if err == nil && !reflect.DeepEqual(got, want) && !(len(got) == 0 && len(want) == 0) {
			t.Fatalf("DecodeDescriptors(%q) = %+v, want %+v", body, got, want)
		}
	})
}

// Decoding is linear in the body whatever it holds: a name of 4 million
// escapes (8 MB) and an unknown field of a million short strings. With
// the whitespace squeezer scanning the rest of its buffer for a quote
// at every escape (as it once did), the first took minutes, and this
// test the whole test timeout.
func TestReliabilityDecodeLinear(t *testing.T) {
	const n = 4 << 20
	var b bytes.Buffer
	b.WriteString(`[{"name":"`)
	b.Write(bytes.Repeat([]byte(`\\`), n))
	b.WriteString(`"},{"name":"b","x-many":[`)
	b.Write(bytes.Repeat([]byte(`"a",`), n/4))
	b.WriteString(`"a"]}]`)
	ds, err := DecodeDescriptors(b.Bytes(), "", 1<<30)
	if err != nil || len(ds) != 2 {
		t.Fatalf("%d descriptors, %v", len(ds), err)
	}
	if len(ds[0].Name) != n || strings.Trim(ds[0].Name, `\`) != "" {
		t.Errorf("name of %d bytes, want %d backslashes", len(ds[0].Name), n)
	}
}

// A snapshot's descriptors are decoded into a slice sized once from the
// body's decoded size (it used to double its way up: half of all the
// bytes decoding allocated), and a frame header that overstates that
// size buys no larger a slice than the body's own length does.
func TestDecodeSizesItsSliceOnce(t *testing.T) {
	ds := make([]Descriptor, 1000)
	for i := range ds {
		ds[i] = Descriptor{Name: fmt.Sprintf("d%02d/file-%04d.txt", i/100, i), Digest: DigestOf([]byte{byte(i)}),
			Size: int64(i), CreatedAt: time.Unix(1767225600+int64(i), 0).UTC(), ContentType: "text/plain", SequenceNumber: int64(i + 1)}
	}
	body, err := EncodeDescriptors(ds)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeDescriptors(body, EncodingZstd, 64<<20)
	if err != nil || len(got) != len(ds) {
		t.Fatalf("%d descriptors, %v", len(got), err)
	}
	if cap(got) > len(got)*3/2+8 {
		t.Errorf("a slice of capacity %d kept for %d descriptors", cap(got), len(got))
	}
	// What decoding allocates, counted on the JSON text (a zstd body's
	// pooled decoder may be made anew: the race detector's sync.Pool
	// drops what it is given at random). Doubling allocated about twice
	// the final slice; a descriptor's strings take 150 bytes more.
	js, err := DecodeBody(body, EncodingZstd, 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	got, err = DecodeDescriptors(js, EncodingNone, 64<<20)
	runtime.ReadMemStats(&after)
	if err != nil || len(got) != len(ds) {
		t.Fatalf("%d descriptors from the JSON text, %v", len(got), err)
	}
	per := int(unsafe.Sizeof(Descriptor{}))
	if alloc, want := after.TotalAlloc-before.TotalAlloc, uint64(len(ds)*(per*3/2+300)); alloc > want {
		t.Errorf("decoding %d descriptors allocated %d KiB, want <= %d KiB", len(ds), alloc>>10, want>>10)
	}

	// A frame that declares 60 MiB of content and holds "[]".
	lying := binary.LittleEndian.AppendUint64([]byte{0x28, 0xb5, 0x2f, 0xfd, 0xe0}, 60<<20)
	lying = append(lying, 0x11, 0, 0, '[', ']')
	if n := descriptorsHint(lying, EncodingZstd, 1<<20); n > 16*len(lying)/jsonPerDescriptor {
		t.Errorf("a %d-byte body declaring 60 MiB: room for %d descriptors", len(lying), n)
	}
	if _, err := DecodeDescriptors(lying, EncodingZstd, 64<<20); !errors.Is(err, ErrCorrupt) {
		t.Errorf("a frame that holds less than it declares: %v, want ErrCorrupt", err)
	}
}
