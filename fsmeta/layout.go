package fsmeta

import (
	"github.com/sluicefs/sluice/internal/mix"
	"github.com/sluicefs/sluice/proto/metapb"
)

// Where a file's chunks live. A file uses Stripe consecutive chains of its
// chain table, starting at a place its inode number picks, and chunk i
// lives on the file's chain perm(i) mod Stripe, where perm is a keyed
// bijection of 64-bit integers (the inode is the key). Everything is
// integer arithmetic on uint64 with wrap-around, so any language computes
// the same chains (the test vectors in layout_test.go pin it): consecutive
// chunks scatter over the stripe, and files spread over the table.

// chunkPerm is the keyed bijection: the chunk index, keyed by the inode.
func chunkPerm(ino, index uint64) uint64 {
	return mix.Mix64(index ^ mix.Mix64(ino+0x9e3779b97f4a7c15))
}

// ChunkChain returns the chain that holds chunk index of file ino with
// layout l, given the chain table's chains in order.
func ChunkChain(table []uint32, l *metapb.Layout, ino uint64, index uint64) uint32 {
	n := uint64(len(table))
	if n == 0 {
		return 0
	}
	stripe := uint64(l.GetStripe())
	if stripe == 0 || stripe > n {
		stripe = n
	}
	start := mix.Mix64(ino) % n
	j := chunkPerm(ino, index) % stripe
	return table[(start+j)%n]
}
