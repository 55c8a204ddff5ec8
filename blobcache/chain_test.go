package blobcache

import (
	"bytes"
	"crypto/sha256"
	"testing"

	"github.com/pugmark/pugfs/layout"
)

// TestChainResume: one pass over a body yields its digest and a proof per
// chunk; every chunk checks against its proof, and a chunk with one byte
// changed, a chunk at the wrong index or of the wrong length does not.
// This also pins crypto/sha256's marshaled state, which the proofs resume
// from: a Go release that changed it fails here, not in production.
func TestChainResume(t *testing.T) {
	const cs = 4096
	for _, size := range []int{0, 1, 64, cs - 1, cs, cs + 1, 5*cs + 123, 6 * cs} {
		body := make([]byte, size)
		for i := range body {
			body[i] = byte(i*7 + i/cs)
		}
		n := int64((size + cs - 1) / cs)
		ch := newBlobChain(cs, n)
		var chunks [][]byte
		for off := 0; off < size; off += cs {
			c := body[off:min(off+cs, size)]
			chunks = append(chunks, c)
			ch.add(c)
		}
		got, err := ch.sum()
		if err != nil {
			t.Fatal(err)
		}
		want := layout.Digest(sha256.Sum256(body))
		if got != want {
			t.Fatalf("size %d: digest %s, want %s", size, got, want)
		}
		if len(ch.cvs) != max(len(chunks)-1, 0) {
			t.Fatalf("size %d: %d proofs for %d chunks", size, len(ch.cvs), len(chunks))
		}
		for i, c := range chunks {
			idx := int64(i)
			if !chunkProven(ch.cvs, want, cs, idx, c) {
				t.Errorf("size %d: chunk %d does not check against its proof", size, i)
			}
			bad := bytes.Clone(c)
			bad[len(bad)/2] ^= 1
			if chunkProven(ch.cvs, want, cs, idx, bad) {
				t.Errorf("size %d: chunk %d with one byte changed checks", size, i)
			}
			if len(chunks) > 1 && chunkProven(ch.cvs, want, cs, (idx+1)%int64(len(chunks)), c) {
				t.Errorf("size %d: chunk %d checks at index %d", size, i, (i+1)%len(chunks))
			}
			if chunkProven(ch.cvs, want, cs, idx, c[:len(c)-1]) {
				t.Errorf("size %d: chunk %d one byte short checks", size, i)
			}
		}
		if (n > 0 && chunkProven(ch.cvs, want, cs, n, nil)) || chunkProven(ch.cvs, want, cs, -1, nil) {
			t.Errorf("size %d: an index out of range checks", size)
		}
	}
}

// TestChainShortChunkInside: a short chunk anywhere but at the end is an
// error of the pass, not a body with a wrong proof.
func TestChainShortChunkInside(t *testing.T) {
	ch := newBlobChain(64, 3)
	ch.add(make([]byte, 64))
	ch.add(make([]byte, 10))
	ch.add(make([]byte, 64))
	if _, err := ch.sum(); err == nil {
		t.Fatal("a short chunk in the middle went unnoticed")
	}
}
