package shmring

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"
)

// Ring layout (the Ior), in a segment of its own:
//
//	0    magic "SLRING01" | capacity u32 | reserved       (one 64-byte line)
//	64   submission head (the agent's next entry)         (each index on its own line,
//	128  submission tail (the client's next free slot)     so producer and consumer
//	192  completion head (the client's next completion)    never share a cache line)
//	256  completion tail (the agent's next free slot)
//	320  heartbeat: unix nanoseconds, written by the client
//	384  capacity x 40-byte entries, then capacity x 32-byte completions
//
// An entry: file u64 | offset u64 | buffer offset u64 | user data u64 |
// length u32 | op u32. A completion: user data u64 | status i32 |
// length u32 | CRC32C u32 | 12 reserved bytes.
//
// Each queue has one producer and one consumer; indices only grow (mod
// 2^64) and are published with atomic stores after the slots are written.
const (
	ringMagic   = "SLRING01"
	offSqHead   = 64
	offSqTail   = 128
	offCqHead   = 192
	offCqTail   = 256
	offBeat     = 320
	offEntries  = 384
	entrySize   = 40
	complSize   = 32
	maxCapacity = 1 << 20
)

// Op says which way an entry moves bytes. Zero is no op, so an entry the
// client never filled in is refused rather than taken for a read.
type Op uint32

// The ops an entry may carry.
const (
	OpRead  Op = 1 // file bytes into the Iov
	OpWrite Op = 2 // Iov bytes into the file
)

// Entry asks the agent to move Length bytes of File at Offset to or from
// the client's Iov at BufOff (Op says which way); UserData comes back in
// the completion. What File names is the agent's business.
type Entry struct {
	File     uint64
	Offset   uint64
	BufOff   uint64
	UserData uint64
	Length   uint32
	Op       Op
}

// valid reports whether e is an op the agent knows on bytes inside an Iov
// of iovLen bytes.
func (e Entry) valid(iovLen int) bool {
	return (e.Op == OpRead || e.Op == OpWrite) && e.BufOff <= uint64(iovLen) && uint64(e.Length) <= uint64(iovLen)-e.BufOff
}

// Completion reports an entry done: Status 0 or an error code, the bytes
// moved, and the CRC32C of those bytes in the Iov, so a half-written buffer
// is never taken as data.
type Completion struct {
	UserData uint64
	Status   int32
	Length   uint32
	CRC      uint32
}

// Ring is a submission and a completion queue in shared memory.
type Ring struct {
	mem  []byte
	cap  uint64
	mask uint64
}

// RingSize is the bytes a ring of capacity entries needs.
func RingSize(capacity int) int { return offEntries + capacity*(entrySize+complSize) }

// InitRing lays out a new ring in mem.
func InitRing(mem []byte, capacity int) (*Ring, error) {
	if capacity <= 0 || capacity > maxCapacity || capacity&(capacity-1) != 0 || len(mem) < RingSize(capacity) {
		return nil, fmt.Errorf("shmring: ring of %d entries in %d bytes", capacity, len(mem))
	}
	clear(mem[:RingSize(capacity)])
	copy(mem, ringMagic)
	binary.LittleEndian.PutUint32(mem[8:], uint32(capacity))
	return &Ring{mem: mem, cap: uint64(capacity), mask: uint64(capacity - 1)}, nil
}

// AttachRing checks and uses a ring another process laid out.
func AttachRing(mem []byte) (*Ring, error) {
	if len(mem) < offEntries || string(mem[:8]) != ringMagic {
		return nil, fmt.Errorf("shmring: not a ring")
	}
	c := int(binary.LittleEndian.Uint32(mem[8:]))
	if c <= 0 || c > maxCapacity || c&(c-1) != 0 || len(mem) < RingSize(c) {
		return nil, fmt.Errorf("shmring: ring of %d entries in %d bytes", c, len(mem))
	}
	return &Ring{mem: mem, cap: uint64(c), mask: uint64(c - 1)}, nil
}

func (r *Ring) word(off int) *uint64 { return (*uint64)(unsafe.Pointer(&r.mem[off])) }

func (r *Ring) load(off int) uint64     { return atomic.LoadUint64(r.word(off)) }
func (r *Ring) store(off int, v uint64) { atomic.StoreUint64(r.word(off), v) }

// Capacity is the number of entries each queue holds.
func (r *Ring) Capacity() int { return int(r.cap) }

func (r *Ring) entry(i uint64) []byte {
	o := offEntries + int(i&r.mask)*entrySize
	return r.mem[o : o+entrySize]
}

func (r *Ring) compl(i uint64) []byte {
	o := offEntries + int(r.cap)*entrySize + int(i&r.mask)*complSize
	return r.mem[o : o+complSize]
}

// Submit queues as many of es as fit (client side) and returns how many.
func (r *Ring) Submit(es []Entry) int {
	head, tail := r.load(offSqHead), r.load(offSqTail)
	n := min(uint64(len(es)), r.cap-(tail-head))
	for i := uint64(0); i < n; i++ {
		b, e := r.entry(tail+i), es[i]
		binary.LittleEndian.PutUint64(b[0:], e.File)
		binary.LittleEndian.PutUint64(b[8:], e.Offset)
		binary.LittleEndian.PutUint64(b[16:], e.BufOff)
		binary.LittleEndian.PutUint64(b[24:], e.UserData)
		binary.LittleEndian.PutUint32(b[32:], e.Length)
		binary.LittleEndian.PutUint32(b[36:], uint32(e.Op))
	}
	r.store(offSqTail, tail+n)
	return int(n)
}

// Take dequeues up to len(es) entries (agent side), many at a time, and
// stops after the entry that brings their lengths to maxBytes (0: no bound).
func (r *Ring) Take(es []Entry, maxBytes uint64) int {
	head, tail := r.load(offSqHead), r.load(offSqTail)
	n := min(uint64(len(es)), tail-head)
	if tail-head > r.cap {
		n = 0 // a corrupt tail: take nothing rather than garbage
	}
	var bytes uint64
	for i := uint64(0); i < n; i++ {
		b := r.entry(head + i)
		es[i] = Entry{
			File: binary.LittleEndian.Uint64(b[0:]), Offset: binary.LittleEndian.Uint64(b[8:]),
			BufOff: binary.LittleEndian.Uint64(b[16:]), UserData: binary.LittleEndian.Uint64(b[24:]),
			Length: binary.LittleEndian.Uint32(b[32:]), Op: Op(binary.LittleEndian.Uint32(b[36:])),
		}
		if bytes += uint64(es[i].Length); maxBytes > 0 && bytes >= maxBytes {
			n = i + 1
		}
	}
	r.store(offSqHead, head+n)
	return int(n)
}

// Complete queues completions (agent side) and returns how many fit.
func (r *Ring) Complete(cs []Completion) int {
	head, tail := r.load(offCqHead), r.load(offCqTail)
	n := min(uint64(len(cs)), r.cap-(tail-head))
	for i := uint64(0); i < n; i++ {
		b, c := r.compl(tail+i), cs[i]
		binary.LittleEndian.PutUint64(b[0:], c.UserData)
		binary.LittleEndian.PutUint32(b[8:], uint32(c.Status))
		binary.LittleEndian.PutUint32(b[12:], c.Length)
		binary.LittleEndian.PutUint32(b[16:], c.CRC)
	}
	r.store(offCqTail, tail+n)
	return int(n)
}

// Reap dequeues up to len(cs) completions (client side).
func (r *Ring) Reap(cs []Completion) int {
	head, tail := r.load(offCqHead), r.load(offCqTail)
	n := min(uint64(len(cs)), tail-head)
	if tail-head > r.cap {
		n = 0
	}
	for i := uint64(0); i < n; i++ {
		b := r.compl(head + i)
		cs[i] = Completion{UserData: binary.LittleEndian.Uint64(b[0:]), Status: int32(binary.LittleEndian.Uint32(b[8:])),
			Length: binary.LittleEndian.Uint32(b[12:]), CRC: binary.LittleEndian.Uint32(b[16:])}
	}
	r.store(offCqHead, head+n)
	return int(n)
}

// Beat records that the client is alive.
func (r *Ring) Beat(now time.Time) { r.store(offBeat, uint64(now.UnixNano())) }

// LastBeat is when the client last said it was alive.
func (r *Ring) LastBeat() time.Time { return time.Unix(0, int64(r.load(offBeat))) }
