package replica

import "testing"

func TestSelectRackAware(t *testing.T) {
	racks := map[int32]string{1: "a", 2: "b", 3: "b", 4: "c"}
	rackOf := func(id int32) string { return racks[id] }
	leader := ReplicaView{ID: 1, LogEndOffset: 100}
	for _, tc := range []struct {
		name      string
		rack      string
		followers []ReplicaView
		want      int32
	}{
		{"no client rack", "", []ReplicaView{{ID: 2, LogEndOffset: 100}}, -1},
		{"the leader's rack", "a", []ReplicaView{{ID: 2, LogEndOffset: 100}}, -1},
		{"no replica in the rack", "d", []ReplicaView{{ID: 2, LogEndOffset: 100}}, -1},
		{"the rack's follower", "c", []ReplicaView{{ID: 2, LogEndOffset: 100}, {ID: 4, LogEndOffset: 90}}, 4},
		{"the most caught-up of the rack", "b", []ReplicaView{{ID: 2, LogEndOffset: 90}, {ID: 3, LogEndOffset: 95}}, 3},
		{"then the most recently caught up", "b",
			[]ReplicaView{{ID: 2, LogEndOffset: 95, TimeSinceCaughtUpMs: 10}, {ID: 3, LogEndOffset: 95, TimeSinceCaughtUpMs: 500}}, 2},
		{"the rack's follower is not eligible", "c", []ReplicaView{{ID: 2, LogEndOffset: 100}}, -1},
	} {
		if got := SelectRackAware(tc.rack, rackOf, leader, tc.followers); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}
