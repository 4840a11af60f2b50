package fsmeta

import (
	"slices"
	"testing"

	"github.com/sluicefs/sluice/internal/mix"
	"github.com/sluicefs/sluice/proto/metapb"
)

// TestChunkChainVectors pins the placement function: other languages (the
// Python package) must compute the same chains. Changing these values is
// changing where existing files' chunks are.
func TestChunkChainVectors(t *testing.T) {
	table := []uint32{11, 12, 13, 14, 15, 16, 17, 18}
	l := &metapb.Layout{Stripe: 4}
	var got []uint32
	for i := uint64(0); i < 8; i++ {
		got = append(got, ChunkChain(table, l, 42, i))
	}
	if want := []uint32{16, 13, 13, 14, 15, 14, 13, 16}; !slices.Equal(got, want) {
		t.Fatalf("inode 42 chunks 0..7 on chains %v, want %v", got, want)
	}
	// Every chunk lands on one of the file's 4 consecutive chains.
	start := mix.Mix64(42) % 8
	for i, c := range got {
		j := (uint64(c) - 11 + 8 - start) % 8
		if j >= 4 {
			t.Fatalf("chunk %d on chain %d, outside the file's stripe starting at %d", i, c, table[start])
		}
	}
}

func TestChunkChainSpreads(t *testing.T) {
	table := make([]uint32, 16)
	for i := range table {
		table[i] = uint32(100 + i)
	}
	l := &metapb.Layout{Stripe: 8}
	// One file: its chunks spread evenly over its 8 chains.
	count := map[uint32]int{}
	for i := uint64(0); i < 8000; i++ {
		count[ChunkChain(table, l, 7, i)]++
	}
	if len(count) != 8 {
		t.Fatalf("file uses %d chains, want 8", len(count))
	}
	for c, n := range count {
		if n < 850 || n > 1150 {
			t.Fatalf("chain %d holds %d of 8000 chunks", c, n)
		}
	}
	// Many files: their first chunks spread over the whole table.
	first := map[uint32]int{}
	for ino := uint64(1); ino <= 1600; ino++ {
		first[ChunkChain(table, l, ino, 0)]++
	}
	for c, n := range first {
		if n < 60 || n > 140 {
			t.Fatalf("chain %d holds the first chunk of %d of 1600 files", c, n)
		}
	}
	if len(first) != 16 {
		t.Fatalf("first chunks on %d chains, want 16", len(first))
	}
	if ChunkChain(nil, l, 1, 1) != 0 {
		t.Fatal("a chunk placed with no chains")
	}
	if c := ChunkChain(table[:3], &metapb.Layout{Stripe: 9}, 5, 5); c < 100 || c > 102 {
		t.Fatalf("stripe wider than the table: chain %d", c)
	}
}
