package nemesis

import (
	"fmt"
	"path/filepath"
	"slices"
	"sort"

	"github.com/sluicefs/sluice/chunkio"
	"github.com/sluicefs/sluice/proto/mgmtdpb"
	"github.com/sluicefs/sluice/proto/storagepb"
	"github.com/sluicefs/sluice/server/chunkstore"
)

// ChunkState is what a target's records say of one chunk.
type ChunkState struct {
	Chain     uint32 // the chain the record names (0: none)
	Committed bool
	Ver       uint64
	Length    uint32
	CRC       uint32
}

func (c ChunkState) String() string {
	if !c.Committed {
		return fmt.Sprintf("chain %d, never committed", c.Chain)
	}
	return fmt.Sprintf("chain %d v%d len %d crc %08x", c.Chain, c.Ver, c.Length, c.CRC)
}

// TargetChunks is every chunk a target holds.
type TargetChunks map[chunkio.ID]ChunkState

// LoadTarget opens a stopped target's directory and reads its chunk
// records. maxChunk must be at least the chunk size the node ran with.
func LoadTarget(dir string, maxChunk int) (TargetChunks, error) {
	e, err := chunkstore.OpenEngine(chunkstore.EngineConfig{Dir: dir, MaxChunkSize: maxChunk})
	if err != nil {
		return nil, fmt.Errorf("open target %s: %w", dir, err)
	}
	out := TargetChunks{}
	err = e.Chunks(func(id chunkio.ID, m *storagepb.ChunkMeta) bool {
		st := ChunkState{Chain: m.GetChain()}
		if c := m.GetCommitted(); c != nil {
			st.Committed, st.Ver, st.Length, st.CRC = true, c.Ver, c.Length, c.Crc
		}
		out[id] = st
		return true
	})
	if cerr := e.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("read target %s: %w", dir, err)
	}
	return out, nil
}

// TargetDir is target id's directory under its storage node's directory.
func TargetDir(nodeDir string, id uint32) string {
	return filepath.Join(nodeDir, fmt.Sprint("target-", id))
}

// CheckReplicas checks the targets' chunks against the final map: every
// replica of a chain holds the same chunks of that chain at the same
// committed version, length and CRC; every chunk names a chain and lives
// only on targets of it; and, where expect knows a chunk's chain (the
// chunks of the workload's files), the chain is that one.
func CheckReplicas(m *mgmtdpb.ClusterMap, targets map[uint32]TargetChunks, expect func(chunkio.ID) (uint32, bool)) []string {
	var problems []string
	chains := map[uint32][]uint32{}
	for _, c := range m.GetChains() {
		chains[c.Id] = c.Targets
	}
	ids := make([]uint32, 0, len(targets))
	for id := range targets {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	// A chunk's chain is the one its record names; a record that names
	// none is reported, and where its file places it that chain stands in,
	// so that the replicas are still compared.
	chainOf := map[uint32]map[chunkio.ID]uint32{}
	for _, tid := range ids {
		chainOf[tid] = map[chunkio.ID]uint32{}
		for cid, st := range targets[tid] {
			want, known := expect(cid)
			eff := st.Chain
			switch {
			case st.Chain == 0 && known:
				problems = append(problems, fmt.Sprintf("target %d: chunk %v names no chain in its record (its file places it in chain %d)", tid, cid, want))
				eff = want
			case st.Chain == 0:
				problems = append(problems, fmt.Sprintf("target %d: chunk %v names no chain in its record", tid, cid))
				continue
			case known && want != st.Chain:
				problems = append(problems, fmt.Sprintf("target %d: chunk %v names chain %d, its file places it in chain %d", tid, cid, st.Chain, want))
			}
			chainOf[tid][cid] = eff
			if !slices.Contains(chains[eff], tid) {
				problems = append(problems, fmt.Sprintf("target %d: chunk %v of chain %d, whose targets are %v", tid, cid, eff, chains[eff]))
			}
		}
	}
	cids := make([]uint32, 0, len(chains))
	for id := range chains {
		cids = append(cids, id)
	}
	slices.Sort(cids)
	for _, cid := range cids {
		members := chains[cid]
		// Each replica's chunks of this chain.
		per := make([]map[chunkio.ID]ChunkState, len(members))
		all := map[chunkio.ID]bool{}
		for i, tid := range members {
			per[i] = map[chunkio.ID]ChunkState{}
			tc, ok := targets[tid]
			if !ok {
				problems = append(problems, fmt.Sprintf("chain %d: target %d's records were not read", cid, tid))
				continue
			}
			for id, st := range tc {
				if chainOf[tid][id] == cid && st.Committed { // a chunk never committed holds nothing
					per[i][id] = st
					all[id] = true
				}
			}
		}
		chunks := make([]chunkio.ID, 0, len(all))
		for id := range all {
			chunks = append(chunks, id)
		}
		sort.Slice(chunks, func(i, j int) bool {
			if chunks[i].Inode != chunks[j].Inode {
				return chunks[i].Inode < chunks[j].Inode
			}
			return chunks[i].Index < chunks[j].Index
		})
		for _, id := range chunks {
			var first *ChunkState
			same := true
			desc := ""
			for i, tid := range members {
				st, ok := per[i][id]
				if ok {
					desc += fmt.Sprintf(" target %d: %v;", tid, st)
				} else {
					desc += fmt.Sprintf(" target %d: missing;", tid)
				}
				switch {
				case !ok:
					same = false
				case first == nil:
					first = &st
				case st.Committed != first.Committed || st.Ver != first.Ver || st.Length != first.Length || st.CRC != first.CRC:
					same = false
				}
			}
			if !same {
				problems = append(problems, fmt.Sprintf("chain %d: replicas of chunk %v differ:%s", cid, id, desc))
			}
		}
	}
	return problems
}
