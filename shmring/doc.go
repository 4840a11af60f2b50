// Package shmring owns USRBIO-style shared memory between applications and
// the local agent: memfd segments (hugetlb when huge pages are reserved,
// normal pages otherwise, sealed against resizing), rings of I/O entries and
// completions with single-producer single-consumer indices on separate
// cache lines, eventfd wake-ups, a heartbeat each client keeps fresh, and
// the hand-over of segment and eventfd descriptors over a unix socket
// (SCM_RIGHTS). After the hand-over the same connection carries small
// control messages (Client.Call), and its end tells the agent the client
// died. Server is the agent's side: it maps what clients hand it, checks
// every entry (a known op, a range inside the Iov) before a Serving sees
// it, and reclaims the rings and buffers of clients that die; a completion
// for a dead client is dropped.
//
// What an entry's file names and what control messages say is the agent's
// business (sdk); shmring only moves entries, completions, messages and
// bytes. Like fabric, it
// imports nothing else of Sluice's.
package shmring
