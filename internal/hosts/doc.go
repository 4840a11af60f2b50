// Package hosts emulates a small network of hosts on one Linux machine, for
// tests that need processes on distinct addresses with links that can be
// slowed, cut and healed: a test harness, never imported outside tests.
//
// A Net owns, for its lifetime:
//
//   - one network namespace holding a bridge (br0, 198.18.0.1/24), the
//     switch every host plugs into; it has no uplink, so nothing routes
//     beyond the Net;
//   - one network namespace per host, with loopback and eth0 at
//     198.18.0.10, .11, … on 198.18.0.0/24 (RFC 2544's benchmarking
//     range), no default route and IPv6 off (no link-local way around
//     a partition), joined to the bridge by a veth pair
//     created between the two namespaces directly, so no link ever passes
//     through the machine's own namespace;
//   - per host, an optional tbf qdisc on both ends of that veth pair
//     (SetRate: bytes per second each way, changeable while traffic
//     flows), an nftables table inside the host's namespace that drops
//     traffic to and from blocked peers (Isolate, Block, Heal), and the
//     link's state (SetLink);
//   - the processes started in hosts (Host.Start, through `ip netns exec`),
//     their output kept in memory; Close kills them before it removes the
//     namespaces.
//
// Namespace names are "slh-<pid>-<n>-…": the prefix marks them as this
// package's, the pid says whose. Open removes the namespaces of processes
// that are gone (a crashed run), and any other "slh-" name it cannot
// parse; namespaces of live processes (another package's tests running in
// parallel) are left alone. Close removes everything its Net made, and a
// killed test process takes its children with it (Pdeathsig).
//
// The test process itself may act as a host: Host.Dial and Host.Listen
// create their socket inside the host's namespace (on a locked OS thread),
// after which the connection works from any goroutine. Code that opens its
// own connections on other goroutines (an SDK client) must run in a child
// process started in the host instead.
//
// Everything here needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN): New skips
// its test, saying why, when it is missing or namespaces cannot be made.
package hosts
