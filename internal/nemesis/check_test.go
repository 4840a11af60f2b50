package nemesis

import (
	"strings"
	"testing"
	"time"

	"github.com/sluicefs/sluice/chunkio"
	"github.com/sluicefs/sluice/proto/mgmtdpb"
)

func TestValueRoundTrip(t *testing.T) {
	b := make([]byte, BlockSize)
	if v, err := DecodeValue(b, 3); v != 0 || err != nil {
		t.Fatalf("zeros: %s, %v; want zero, nil", FormatValue(v), err)
	}
	v := ValueID(7, 12345)
	EncodeValue(b, 3, v)
	if got, err := DecodeValue(b, 3); got != v || err != nil {
		t.Fatalf("decode: %s, %v; want %s", FormatValue(got), err, FormatValue(v))
	}
	if _, err := DecodeValue(b, 4); err == nil {
		t.Fatal("key 3's block read as key 4's: no error")
	}
	// Torn: the first half of one value, the second of another.
	other := make([]byte, BlockSize)
	EncodeValue(other, 3, ValueID(8, 1))
	torn := append(append([]byte(nil), b[:BlockSize/2]...), other[BlockSize/2:]...)
	if _, err := DecodeValue(torn, 3); err == nil {
		t.Fatal("torn block: no error")
	}
	// Half zeros: a value whose tail was lost.
	half := append(append([]byte(nil), b[:BlockSize/2]...), make([]byte, BlockSize/2)...)
	if _, err := DecodeValue(half, 3); err == nil {
		t.Fatal("half-zero block: no error")
	}
	b[100] ^= 1
	if _, err := DecodeValue(b, 3); err == nil {
		t.Fatal("flipped bit: no error")
	}
}

// hist builds a history of key 0 from compact ops.
func op(kind string, v uint64, call, ret int64, status, phase string) Op {
	return Op{Key: 0, Kind: kind, Value: v, Call: int64(time.Duration(call) * time.Millisecond), Return: int64(time.Duration(ret) * time.Millisecond), Status: status, Phase: phase}
}

func TestCheckHistory(t *testing.T) {
	a, b, c := ValueID(2, 1), ValueID(3, 1), ValueID(2, 2)
	keys := []Key{{ID: 0}}
	onceKeys := []Key{{ID: 0, WriteOnce: true}}
	cases := []struct {
		name string
		keys []Key
		ops  []Op
		// what must be found
		linear  bool
		lost    int
		corrupt int
		missing int
		phantom int
	}{
		{name: "good", keys: keys, linear: true, ops: []Op{
			op(OpWrite, a, 0, 10, StatusOK, "setup"),
			op(OpRead, a, 20, 30, StatusOK, "run"),
			op(OpWrite, b, 40, 50, StatusOK, "run"),
			op(OpRead, a, 45, 55, StatusOK, "run"), // concurrent with b's write: either is fine
			op(OpRead, b, 60, 70, StatusOK, "final"),
		}},
		{name: "stale read", keys: keys, linear: false, ops: []Op{
			op(OpWrite, a, 0, 10, StatusOK, "setup"),
			op(OpWrite, b, 20, 30, StatusOK, "run"),
			op(OpRead, a, 40, 50, StatusOK, "run"), // b was acknowledged before this read began
			op(OpRead, b, 60, 70, StatusOK, "final"),
		}},
		{name: "a, b, a again", keys: keys, linear: false, ops: []Op{
			op(OpWrite, a, 0, 10, StatusOK, "setup"),
			op(OpWrite, b, 20, 100, StatusInfo, "run"), // a retried write that timed out
			op(OpRead, b, 30, 40, StatusOK, "run"),
			op(OpRead, a, 50, 60, StatusOK, "run"),
			op(OpRead, a, 200, 210, StatusOK, "final"),
		}},
		{name: "indeterminate write seen late", keys: keys, linear: true, ops: []Op{
			op(OpWrite, a, 0, 10, StatusOK, "setup"),
			op(OpWrite, b, 20, 30, StatusInfo, "run"),
			op(OpRead, a, 40, 50, StatusOK, "run"),
			op(OpRead, b, 60, 70, StatusOK, "final"), // took effect after all
		}},
		{name: "indeterminate writes never read", keys: keys, linear: true, ops: []Op{
			op(OpWrite, a, 0, 10, StatusOK, "setup"),
			op(OpWrite, b, 20, 30, StatusInfo, "run"),
			op(OpWrite, c, 25, 35, StatusInfo, "run"),
			op(OpRead, a, 40, 50, StatusOK, "run"),
			op(OpRead, a, 60, 70, StatusOK, "final"),
		}},
		{name: "indeterminate write, then its predecessor again", keys: keys, linear: false, ops: []Op{
			op(OpWrite, a, 0, 10, StatusOK, "setup"),
			op(OpWrite, b, 20, 30, StatusInfo, "run"),
			op(OpWrite, c, 25, 35, StatusInfo, "run"), // never read: left out
			op(OpRead, b, 40, 50, StatusOK, "run"),
			op(OpRead, a, 60, 70, StatusOK, "final"),
		}},
		{name: "write-once key lost", keys: onceKeys, linear: false, lost: 1, ops: []Op{
			op(OpWrite, a, 0, 10, StatusOK, "setup"),
			op(OpRead, a, 20, 30, StatusOK, "run"),
			op(OpRead, 0, 40, 50, StatusOK, "final"), // zeros after a restart
		}},
		{name: "last acknowledged write lost", keys: keys, linear: false, lost: 1, ops: []Op{
			op(OpWrite, a, 0, 10, StatusOK, "setup"),
			op(OpWrite, b, 20, 30, StatusOK, "run"),
			op(OpRead, a, 40, 50, StatusOK, "final"),
		}},
		{name: "overwritten, not lost", keys: keys, linear: true, ops: []Op{
			op(OpWrite, a, 0, 10, StatusOK, "setup"),
			op(OpWrite, b, 20, 30, StatusOK, "run"),
			op(OpWrite, c, 40, 50, StatusOK, "run"),
			op(OpRead, c, 60, 70, StatusOK, "final"),
		}},
		{name: "corrupt read", keys: keys, linear: true, corrupt: 1, ops: []Op{
			op(OpWrite, a, 0, 10, StatusOK, "setup"),
			{Key: 0, Kind: OpRead, Call: 20e6, Return: 30e6, Status: StatusCorrupt, Err: "checksum", Phase: "run"},
			op(OpRead, a, 40, 50, StatusOK, "final"),
		}},
		{name: "no final read", keys: keys, linear: true, missing: 1, ops: []Op{
			op(OpWrite, a, 0, 10, StatusOK, "setup"),
			op(OpRead, 0, 20, 30, StatusFail, "final"),
		}},
		{name: "value never written", keys: keys, linear: false, phantom: 1, ops: []Op{
			op(OpWrite, a, 0, 10, StatusOK, "setup"),
			op(OpRead, c, 20, 30, StatusOK, "run"),
			op(OpRead, a, 40, 50, StatusOK, "final"),
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := CheckHistory(tc.ops, tc.keys, 10*time.Second, "")
			if v.Linearizable != tc.linear || v.LostWrites != tc.lost || len(v.Corrupt) != tc.corrupt || len(v.Missing) != tc.missing || len(v.Phantom) != tc.phantom {
				t.Fatalf("linearizable %v lost %d corrupt %d missing %d phantom %d; want %v %d %d %d %d\n%s",
					v.Linearizable, v.LostWrites, len(v.Corrupt), len(v.Missing), len(v.Phantom), tc.linear, tc.lost, tc.corrupt, tc.missing, tc.phantom,
					strings.Join(v.Problems(), "\n"))
			}
			if ok := tc.linear && tc.lost+tc.corrupt+tc.missing+tc.phantom == 0; v.OK() != ok {
				t.Fatalf("OK() = %v, want %v: %v", v.OK(), ok, v.Problems())
			}
		})
	}
}

func TestCheckReplicas(t *testing.T) {
	m := &mgmtdpb.ClusterMap{Chains: []*mgmtdpb.Chain{
		{Id: 1, Targets: []uint32{1, 2, 3}},
		{Id: 2, Targets: []uint32{2, 3, 4}},
	}}
	x, y := chunkio.ID{Inode: 5, Index: 0}, chunkio.ID{Inode: 5, Index: 1}
	good := func() map[uint32]TargetChunks {
		st1 := ChunkState{Chain: 1, Committed: true, Ver: 3, Length: 4096, CRC: 0xabc}
		st2 := ChunkState{Chain: 2, Committed: true, Ver: 7, Length: 8192, CRC: 0xdef}
		return map[uint32]TargetChunks{
			1: {x: st1},
			2: {x: st1, y: st2},
			3: {x: st1, y: st2},
			4: {y: st2},
		}
	}
	expect := func(id chunkio.ID) (uint32, bool) { return 1 + id.Index, true }
	if p := CheckReplicas(m, good(), expect); len(p) != 0 {
		t.Fatalf("identical replicas: %v", p)
	}
	cases := map[string]func(ts map[uint32]TargetChunks){
		"older version":     func(ts map[uint32]TargetChunks) { s := ts[3][x]; s.Ver = 2; ts[3][x] = s },
		"other crc":         func(ts map[uint32]TargetChunks) { s := ts[4][y]; s.CRC = 1; ts[4][y] = s },
		"missing chunk":     func(ts map[uint32]TargetChunks) { delete(ts[2], y) },
		"outside its chain": func(ts map[uint32]TargetChunks) { ts[4][x] = ts[1][x] },
		"no chain":          func(ts map[uint32]TargetChunks) { s := ts[1][x]; s.Chain = 0; ts[1][x] = s },
		"wrong chain": func(ts map[uint32]TargetChunks) {
			for _, id := range []uint32{2, 3, 4} {
				s := ts[id][y]
				s.Chain = 1
				ts[id][y] = s
			}
		},
		"target unread": func(ts map[uint32]TargetChunks) { delete(ts, 4) },
	}
	for name, damage := range cases {
		ts := good()
		damage(ts)
		if p := CheckReplicas(m, ts, expect); len(p) == 0 {
			t.Errorf("%s: no problem found", name)
		} else {
			t.Logf("%s: %v", name, p)
		}
	}
}
