package claim

import (
	"math"
	"testing"
	"time"
)

// A row the claimer gave back may lie behind the mark (a limit gave back the
// row of the lower id while the claim of the higher kept its slot): the next
// claim starts at the floor, even when a claim in flight at the give-back
// comes back full after it.
func TestMarkReleasedStartsAtFloor(t *testing.T) {
	var m Mark
	now := time.Unix(1000, 0)
	const rescan = time.Minute
	m.Resume(now, rescan)
	m.Claimed(true, []*Job{{ID: 2}})
	if from, marked := m.Resume(now, rescan); !marked || from != 2 {
		t.Fatalf("after a full claim of row 2: Resume = %d, %v; want 2, true", from, marked)
	}
	m.Claimed(true, []*Job{{ID: 2}})
	m.Released()                     // row 1 given back, behind the mark
	m.Claimed(true, []*Job{{ID: 3}}) // a claim in flight comes back full
	if from, marked := m.Resume(now, rescan); marked || from != math.MinInt64 {
		t.Fatalf("after a give-back: Resume = %d, %v; want the table's start (%d), false", from, marked, int64(math.MinInt64))
	}
	m.Claimed(true, []*Job{{ID: 1}})
	if from, marked := m.Resume(now, rescan); !marked || from != 1 {
		t.Fatalf("the give-back moves the mark once only: Resume = %d, %v; want 1, true", from, marked)
	}
}
