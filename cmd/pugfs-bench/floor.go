package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"time"
)

// The floor of a cold read of a blob (issue #14): pugfs serves no byte
// before the whole blob matched its SHA-256, so a cold read cannot beat
// the slower of reading the bytes from the disk and hashing them once.
// Both are measured in the same run: the native column's cold read is
// the first, and right after it this process hashes the same file (now
// in the page cache) with Go's crypto/sha256, which is what pugfs uses.

// measureFloor times one SHA-256 pass over row r's file and records the
// floor of this run: the slower of it and the native read (v, in the
// row's unit).
func (b *bench) measureFloor(ctx context.Context, r *row, res *cellResult, v float64) error {
	root, err := b.m.root(ctx, r.cells[colNative], false)
	if err != nil {
		return err
	}
	f, err := os.Open(filepath.Join(root, r.floor))
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha256.New()
	buf := make([]byte, 1<<20)
	t0 := time.Now()
	n, err := io.CopyBuffer(h, f, buf)
	if err != nil {
		return err
	}
	hashed := time.Since(t0).Seconds()
	native := v
	if r.unit == unitMiBps {
		native = float64(n) / (1 << 20) / v
	}
	res.floors = append(res.floors, math.Max(native, hashed))
	b.logf("  floor of %s: native read %.2f s, SHA-256 pass %.2f s", r.name, native, hashed)
	return nil
}

// floor is the median floor of a row in seconds, NaN without one.
func (b *bench) floor(r *row) float64 {
	res := b.results[r][colNative]
	if r.floor == "" || res == nil || len(res.floors) == 0 {
		return math.NaN()
	}
	return median(append([]float64(nil), res.floors...))
}

// floorRatio is pugfs's time over the floor, run by run (the two were
// measured moments apart, under the same load), median: how many floors
// a cold read took.
func (b *bench) floorRatio(r *row) float64 {
	nat, pug := b.results[r][colNative], b.results[r][colPugfs]
	if r.floor == "" || nat == nil || pug == nil || pug.err != nil {
		return math.NaN()
	}
	var qs []float64
	for i := 0; i < len(pug.vals) && i < len(nat.floors); i++ {
		secs := pug.vals[i]
		if r.unit == unitMiBps {
			secs = float64(b.cfg.BlobSize) / (1 << 20) / secs
		}
		qs = append(qs, secs/nat.floors[i])
	}
	return median(qs)
}

// floorNote is the line under the table that gives a row's floor.
func (b *bench) floorNote(r *row) string {
	fl := b.floor(r)
	if math.IsNaN(fl) {
		return ""
	}
	return fmt.Sprintf("- floor of \"%s\": %.2f s (the slower of the native cold read and one SHA-256 pass over the same %s, median of each run's); pugfs took %.2fx the floor (median of each run's ratio)",
		r.name, fl, humanBytes(b.cfg.BlobSize), b.floorRatio(r))
}
