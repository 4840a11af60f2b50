//go:build !race

package sdk

// agentEntries is how many entries TestAgentTwoProcesses moves.
const agentEntries = 1_000_000
