// Package shmring owns USRBIO-style shared memory between applications and
// the local agent: memfd segments (hugetlb when huge pages are reserved,
// normal pages otherwise, sealed against resizing), rings of I/O entries and
// completions with single-producer single-consumer indices on separate
// cache lines, eventfd wake-ups, a heartbeat each client keeps fresh, and
// the hand-over of segment and eventfd descriptors over a unix socket
// (SCM_RIGHTS). Server is the agent's side: it maps what clients hand it,
// serves their entries through a handler, and reclaims the rings and
// buffers of clients that die; a completion for a dead client is dropped.
//
// What an entry means (which file, read or write) is the agent's business
// (sdk); shmring only moves entries, completions and bytes. Like fabric, it
// imports nothing else of Sluice's.
package shmring
