// Package shmring owns USRBIO-style shared memory between applications and
// the local agent: memfd segments (hugetlb when reserved), Iov buffers, SPSC
// submission and completion rings, and client heartbeats.
//
// Not built yet: see the SDK issue. Like fabric, it imports nothing else of
// Sluice's.
package shmring
