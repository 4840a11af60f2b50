// Package nemesis is a Jepsen-style fault-injection harness for Sluice's
// storage layer, run against real `sluice server` processes.
//
// It owns four things, each in its own file:
//
//   - the cluster under test (procs.go): three meta replicas and storage
//     nodes as child processes on fixed loopback addresses, so a restarted
//     process keeps its address; each process's log in the run directory;
//   - the workload (workload.go, value.go): SDK clients in the test process
//     on a register workload over 4 KiB blocks, every value unique and
//     self-describing, recorded as a history (history.go);
//   - the nemesis (nemesis.go, netfault.go, diskfault.go): faults drawn by
//     seed — SIGKILL with short and long restarts, kills of every replica of
//     a chain, SIGSTOP pauses past the lease, meta leader kills, nftables
//     partitions of a node's fabric port, a target's disk filled up — each
//     kind a Nemesis whose Inject returns a Fault to Heal, every one logged
//     in the history;
//   - the checker: porcupine per key on a register model, acknowledged
//     writes lost, torn or corrupt reads, values nobody wrote (check.go);
//     and, offline after a clean stop, replicas of each chain identical and
//     no chunk on a target outside its chain (replicas.go).
//
// A partition drops TCP to and from one storage node's fabric port only:
// the node's heartbeats to mgmtd go on, so it keeps its lease while its
// peers and clients cannot reach it (a half-open partition, the harder
// case for the data plane); it ends when healed.
//
// Run (run.go) ties them together: start, load, run faults with the
// workload, heal, wait for every target to serve, read every key, stop,
// check, and report in one summary line.
//
// The checker knows nothing of the implementation: it reads only the
// history, the final cluster map and each target's chunk records. The
// package must never reach into a server process (no shared memory, no
// test hooks): what it knows of the cluster it learns as a client does, or
// from the files once the processes have stopped. It leaves the machine as
// it found it: children killed, its nftables table deleted, its tmpfs
// mounts unmounted, however a run ends (Cluster.Close, Firewall.Close); a
// test process killed outright takes its children with it (Pdeathsig) and
// the next run removes its table and mounts (their owner is gone).
package nemesis
