package dataset

import (
	"math/rand/v2"
	"testing"
)

// deal runs every rank and worker of a plan from start and returns, per
// rank, its steps' positions; it checks every rank takes the same number
// of steps.
func deal(t *testing.T, n, start int64, world, batch int, dropLast bool) (steps int64, seen map[int64]int) {
	t.Helper()
	seen = map[int64]int{}
	for r := 0; r < world; r++ {
		p, err := newPlan(n, start, world, r, batch, dropLast)
		if err != nil {
			t.Fatal(err)
		}
		if r == 0 {
			steps = p.steps()
		} else if p.steps() != steps {
			t.Fatalf("n=%d world=%d: rank %d takes %d steps, rank 0 %d", n, world, r, p.steps(), steps)
		}
		for s := int64(0); s < p.steps(); s++ {
			lo, hi, partial := p.span(s)
			if hi-lo > int64(batch) || (!partial && hi-lo != int64(batch)) {
				t.Fatalf("step %d of rank %d has %d positions (batch %d, partial %v)", s, r, hi-lo, batch, partial)
			}
			for pos := lo; pos < hi; pos++ {
				seen[pos]++
			}
		}
	}
	return steps, seen
}

func TestPlanDealsEveryPositionOnce(t *testing.T) {
	for _, n := range []int64{0, 1, 7, 100, 1000, 1001} {
		for _, world := range []int{1, 2, 3, 8} {
			for _, batch := range []int{1, 4, 32} {
				for _, dropLast := range []bool{false, true} {
					steps, seen := deal(t, n, 0, world, batch, dropLast)
					if p, _ := newPlan(n, 0, world, 0, batch, dropLast); p.consumed(steps) != n {
						t.Fatalf("n=%d: a finished epoch counts %d consumed", n, p.consumed(steps))
					}
					want := n
					if dropLast {
						want = n / int64(world*batch) * int64(world*batch)
					}
					if int64(len(seen)) != want {
						t.Fatalf("n=%d world=%d batch=%d dropLast=%v: %d positions dealt, want %d", n, world, batch, dropLast, len(seen), want)
					}
					for pos, k := range seen {
						if k != 1 || pos < 0 || pos >= want {
							t.Fatalf("position %d dealt %d times", pos, k)
						}
					}
				}
			}
		}
	}
}

// TestPlanResumesWithAnotherWorldSize stops 4 ranks after a random number
// of steps and continues with 3: every position is dealt exactly once.
func TestPlanResumesWithAnotherWorldSize(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 50; trial++ {
		n := int64(rng.IntN(5000) + 1)
		batch := rng.IntN(16) + 1
		p, _ := newPlan(n, 0, 4, 0, batch, false)
		k := rng.Int64N(p.steps() + 1)
		seen := map[int64]int{}
		for r := 0; r < 4; r++ {
			q, _ := newPlan(n, 0, 4, r, batch, false)
			for s := int64(0); s < k; s++ {
				lo, hi, _ := q.span(s)
				for pos := lo; pos < hi; pos++ {
					seen[pos]++
				}
			}
		}
		_, rest := deal(t, n, p.consumed(k), 3, batch, false)
		for pos, c := range rest {
			seen[pos] += c
		}
		if int64(len(seen)) != n {
			t.Fatalf("n=%d batch=%d stop after %d: %d positions covered", n, batch, k, len(seen))
		}
		for pos, c := range seen {
			if c != 1 {
				t.Fatalf("n=%d batch=%d stop after %d: position %d dealt %d times", n, batch, k, pos, c)
			}
		}
	}
}

func TestPlanRejectsBadInput(t *testing.T) {
	for _, c := range []struct {
		n, start           int64
		world, rank, batch int
	}{{10, 0, 1, 0, 0}, {10, 0, 0, 0, 1}, {10, 0, 2, 2, 1}, {10, 0, 2, -1, 1}, {10, 11, 1, 0, 1}, {10, -1, 1, 0, 1}} {
		if _, err := newPlan(c.n, c.start, c.world, c.rank, c.batch, false); err == nil {
			t.Errorf("newPlan(%+v) accepted", c)
		}
	}
}
