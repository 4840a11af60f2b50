//go:build race

package sdk

// agentEntries is how many entries TestAgentTwoProcesses moves: under the
// race detector the agent and the storage under it run ~8x slower, so a
// fifth of the million the plain run moves (`make unit` runs both).
const agentEntries = 200_000
