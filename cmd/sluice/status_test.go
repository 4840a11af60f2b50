package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluicefs/sluice/sdk"
	"github.com/sluicefs/sluice/server/cluster"
	"github.com/sluicefs/sluice/server/mgmtd"
)

// TestStatusTargets: `sluice status` names every target with its node,
// state, its state in each of its chains, whether it is full and its disk
// space, in text and as JSON; a target whose disk counts as full (here,
// every target, as mgmtd.FullBelow is set past any disk) shows `full`.
func TestStatusTargets(t *testing.T) {
	for _, full := range []bool{false, true} {
		t.Run(fmt.Sprintf("full=%v", full), func(t *testing.T) {
			if full {
				// Set before the cluster starts and put back after it
				// stops, so that no heartbeat reads it meanwhile.
				defer func(old uint64) { mgmtd.FullBelow = old }(mgmtd.FullBelow)
				mgmtd.FullBelow = math.MaxUint64
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			c, err := cluster.Start(ctx, cluster.Config{Dir: t.TempDir(), Targets: 3})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			t.Setenv("SLUICE_CLUSTER", c.Addr)
			t.Setenv("SLUICE_TOKEN", c.Token)
			fullMark := ""
			if full {
				fullMark = ", full"
			}
			var lines []*regexp.Regexp
			for id := 1; id <= 3; id++ {
				lines = append(lines, regexp.MustCompile(fmt.Sprintf(
					`(?m)^target %d: serving at node-%d \(127\.0\.0\.1:[0-9]+\)%s, chains 1:serving 2:serving 3:serving, disk [0-9.]+ [KMGTPE]?i?B free of [0-9.]+ [KMGTPE]?i?B$`, id, id, fullMark)))
			}
			// The disks and the full marks arrive with the first heartbeats.
			var out string
			for {
				if out, err = run(t, "status"); err != nil {
					t.Fatal(err)
				}
				matched := 0
				for _, re := range lines {
					if re.MatchString(out) {
						matched++
					}
				}
				if matched == len(lines) {
					break
				}
				if ctx.Err() != nil {
					t.Fatalf("status never showed every target (with %q):\n%s", fullMark, out)
				}
				time.Sleep(50 * time.Millisecond)
			}
			if !full && strings.Contains(out, "full,") {
				t.Fatalf("a target shows full with room on its disk:\n%s", out)
			}
			if !regexp.MustCompile(`(?m)^chain 1 v[0-9]+: [123]:serving [123]:serving [123]:serving$`).MatchString(out) {
				t.Fatalf("no chain 1 with three serving targets:\n%s", out)
			}
			js, err := run(t, "status", "--json")
			if err != nil {
				t.Fatal(err)
			}
			var st sdk.ClusterStatus
			if err := json.Unmarshal([]byte(js), &st); err != nil {
				t.Fatalf("status --json is not JSON: %v\n%s", err, js)
			}
			if len(st.Targets) != 3 || len(st.Chains) != 3 || st.Usage == nil || st.Usage.Targets != 3 || st.Meta.Leader == "" {
				t.Fatalf("status --json: %d targets, %d chains, usage %+v, leader %q; want 3, 3, 3 reporting, a leader\n%s",
					len(st.Targets), len(st.Chains), st.Usage, st.Meta.Leader, js)
			}
			for i, ts := range st.Targets {
				if ts.ID != uint32(i+1) || ts.Node != fmt.Sprint("node-", i+1) || ts.Address == "" || ts.State != "serving" || ts.Full != full ||
					len(ts.Chains) != 3 || ts.Space == nil || ts.Space.TotalBytes == 0 || ts.Space.FreeBytes > ts.Space.TotalBytes {
					t.Errorf("status --json target %d: %+v (space %+v); want id %d on node-%d, serving, full %v, in 3 chains, with its disk",
						i, ts, ts.Space, i+1, i+1, full)
				}
				for _, m := range ts.Chains {
					if m.State != "serving" {
						t.Errorf("target %d in chain %d: %s; want serving", ts.ID, m.Chain, m.State)
					}
				}
			}
			if !strings.Contains(js, `"free_bytes"`) || !strings.Contains(js, `"full"`) {
				t.Errorf("status --json lacks the documented field names:\n%s", js)
			}
		})
	}
}

// TestStatusMoves: status's text for draining targets, moves in flight
// with the new replica's state, and the rebalance.
func TestStatusMoves(t *testing.T) {
	st := &sdk.ClusterStatus{
		Targets: []sdk.TargetStatus{{ID: 4, Node: "s2", Address: "10.0.0.6:7410", State: "serving", Draining: true,
			Chains: []sdk.ChainMember{{Chain: 7, State: "serving"}}}},
		Chains: []sdk.ChainStatus{{ID: 7, Version: 9, Targets: []sdk.ChainTarget{{Target: 4, State: "serving"}, {Target: 13, State: "syncing"}}},
			{ID: 8, Version: 3, Targets: []sdk.ChainTarget{{Target: 5, State: "serving"}}, Leaving: []uint32{5}}},
		Moves: &sdk.MoveProgress{Done: 14, Cancelled: 1, ToGo: 5, Rebalance: true, InFlight: []sdk.Move{{Chain: 7, From: 4, To: 13}},
			Draining: []uint32{4, 6}, Drained: []uint32{6}},
	}
	var b strings.Builder
	writeStatus(&b, st)
	for _, want := range []string{
		"target 4: serving at s2 (10.0.0.6:7410), draining, chains 7:serving, disk unknown\n",
		"moves: 14 done, 1 in flight, 5 to go, 1 cancelled; rebalance on\n",
		"move chain 7: target 4 -> target 13 (syncing)\n",
		"chain 8 v3: 5:serving, leaving [5]\n",
		"draining: targets 4 6; drained (in no chain, safe to stop): 6\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, b.String())
		}
	}
}
