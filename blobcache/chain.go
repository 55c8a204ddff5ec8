package blobcache

import (
	"crypto/sha256"
	"encoding"
	"encoding/binary"
	"fmt"
	"hash"
	"sync/atomic"

	"github.com/pugmark/pugfs/layout"
)

// The chunk proofs of a body come out of the one SHA-256 pass that checks
// its digest: SHA-256 is a chain, each 64-byte block folded into a 32-byte
// state, and the state after chunk i (a chunk is a whole number of blocks)
// is what the rest of the pass continues from. A verify pass records that
// state at every chunk boundary (32 bytes a chunk). A chunk read again
// later is checked by resuming the hash at the state before it, hashing
// the chunk, and comparing with the state recorded after it; the last
// chunk is compared with the digest itself. Bytes that pass are the bytes
// the digest proved: changing them without changing the state after them
// is a collision of SHA-256's compression function. So verifying a body
// costs one SHA-256 pass, where a hash per chunk beside the digest cost
// two, and re-checking a chunk costs that chunk's share of the pass.
//
// Resuming uses crypto/sha256's documented marshaled state (the
// encoding.BinaryUnmarshaler of its hash.Hash): "sha\x03", the eight
// state words, the 64-byte block buffer (empty at a boundary) and the
// length, all big-endian. TestChainResume pins the format.

const (
	chainMagic    = "sha\x03"
	chainStateLen = len(chainMagic) + 32 + sha256.BlockSize + 8
)

// blobChain hashes a body chunk by chunk and records the chaining value
// after every chunk but the last.
type blobChain struct {
	h      hash.Hash
	cs     int64
	cvs    [][32]byte
	n      int64
	err    error
	hashed *atomic.Int64 // Stats.BytesHashed, if set
}

// chainPrealloc is the most chunk states newBlobChain allocates before
// the chunks come (a 4 GiB body of 1 MiB chunks): the count comes from a
// descriptor's size, which a bucket may claim to be anything, and the
// states of a larger body are appended as it is read.
const chainPrealloc = 4096

func newBlobChain(cs, chunks int64) *blobChain {
	return &blobChain{h: sha256.New(), cs: cs, cvs: make([][32]byte, 0, min(max(chunks-1, 0), chainPrealloc))}
}

// newChain returns a chain of the cache's chunk size that counts what it
// hashes.
func (c *Cache) newChain(chunks int64) *blobChain {
	ch := newBlobChain(c.cs, chunks)
	ch.hashed = &c.st.hashed
	return ch
}

// proven is chunkProven for the cache's chunk size, counted.
func (c *Cache) proven(cvs [][32]byte, sum layout.Digest, idx int64, buf []byte) bool {
	c.st.hashed.Add(int64(len(buf)))
	return chunkProven(cvs, sum, c.cs, idx, buf)
}

// add hashes the next chunk. Every chunk but the last must be exactly
// cs bytes (a multiple of the block size: New rounds ChunkSize up).
func (c *blobChain) add(buf []byte) {
	if c.n%c.cs != 0 && c.err == nil {
		c.err = fmt.Errorf("cache: chunk after a short one at %d", c.n)
	}
	if c.n > 0 && c.n%c.cs == 0 {
		// The chunk before this one was whole: its state is a proof.
		c.cvs = append(c.cvs, chainValue(c.h))
	}
	c.h.Write(buf)
	c.n += int64(len(buf))
	if c.hashed != nil {
		c.hashed.Add(int64(len(buf)))
	}
}

// sum returns the digest of everything added.
func (c *blobChain) sum() (layout.Digest, error) {
	var d layout.Digest
	c.h.Sum(d[:0])
	return d, c.err
}

// chainValue returns the state words of h, which must sit on a block
// boundary.
func chainValue(h hash.Hash) [32]byte {
	var st [chainStateLen]byte
	b, err := h.(encoding.BinaryAppender).AppendBinary(st[:0])
	if err != nil || len(b) != chainStateLen {
		panic(fmt.Sprintf("cache: crypto/sha256 state is %d bytes (%v); the chunk proofs need %d", len(b), err, chainStateLen))
	}
	var cv [32]byte
	copy(cv[:], b[len(chainMagic):])
	return cv
}

// resumeChain returns a SHA-256 in the state cv after n bytes (n a
// multiple of the block size).
func resumeChain(cv [32]byte, n int64) hash.Hash {
	var st [chainStateLen]byte
	copy(st[:], chainMagic)
	copy(st[len(chainMagic):], cv[:])
	binary.BigEndian.PutUint64(st[chainStateLen-8:], uint64(n))
	h := sha256.New()
	if err := h.(encoding.BinaryUnmarshaler).UnmarshalBinary(st[:]); err != nil {
		panic(fmt.Sprintf("cache: crypto/sha256 refused a state: %v", err))
	}
	return h
}

// chunkProven reports whether buf is chunk idx of the body whose digest
// is sum and whose chaining values a pass recorded in cvs, chunks of cs.
func chunkProven(cvs [][32]byte, sum layout.Digest, cs, idx int64, buf []byte) bool {
	if idx < 0 || idx > int64(len(cvs)) {
		return false
	}
	var h hash.Hash
	if idx == 0 {
		h = sha256.New()
	} else {
		h = resumeChain(cvs[idx-1], idx*cs)
	}
	if idx < int64(len(cvs)) {
		if int64(len(buf)) != cs {
			return false
		}
		h.Write(buf)
		return chainValue(h) == cvs[idx]
	}
	h.Write(buf)
	var got layout.Digest
	h.Sum(got[:0])
	return got == sum
}
