package cutover

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mm2go/mm2go/checkpoint"
)

func TestStateFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	st, err := LoadState(path)
	require.NoError(t, err)
	require.Nil(t, st, "no file: a new cutover")

	at := time.Date(2026, 12, 3, 1, 0, 0, 0, time.UTC)
	want := &State{Version: stateVersion, Flow: "A->B", Groups: []string{"g1", "g2"}, Topics: []string{"t"}, Started: at,
		Steps: []Step{{Name: StepPreflight, Started: at, Done: at.Add(time.Second), Detail: "ok"}},
		Fence: &Fence{Principals: []string{"User:*"}, Host: "*", Topics: []string{"t"}, KeptOpen: []string{"t"}, Created: at},
		Ends:  []PartitionEnd{{Topic: "t", Partition: 0, End: 42}}}
	require.NoError(t, want.Save(path))
	got, err := LoadState(path)
	require.NoError(t, err)
	require.Equal(t, want, got)
	entries, err := os.ReadDir(filepath.Dir(path))
	require.NoError(t, err)
	require.Len(t, entries, 1, "no temporary file left behind")

	require.NoError(t, os.WriteFile(path, []byte(`{"version": 99}`), 0o600))
	_, err = LoadState(path)
	require.ErrorContains(t, err, "version 99")
	require.NoError(t, os.WriteFile(path, []byte(`{`), 0o600))
	_, err = LoadState(path)
	require.Error(t, err)
}

// TestRunResumes: a state with every step done runs none of them again
// (no cluster is contacted: the options have no clients) and is finished.
func TestRunResumes(t *testing.T) {
	at := time.Date(2026, 12, 3, 1, 0, 0, 0, time.UTC)
	st := &State{Version: stateVersion, Flow: "A->B", Groups: []string{"g"}, Started: at}
	for _, name := range []string{StepPreflight, StepFence, StepDrain, StepGroups, StepOffsets, StepVerify} {
		st.Steps = append(st.Steps, Step{Name: name, Started: at, Done: at, Detail: name + " detail"})
	}
	var out bytes.Buffer
	saved := 0
	got, err := Run(context.Background(), Options{Flow: "A->B", Groups: []string{"g", "g"}, Out: &out,
		Save: func(*State) error { saved++; return nil }}, st)
	require.NoError(t, err)
	require.Same(t, st, got)
	require.NotNil(t, got.Finished)
	require.Equal(t, 1, saved)
	require.Contains(t, out.String(), "continuing the cutover")
	require.Equal(t, 6, strings.Count(out.String(), "done at"), out.String())
}

func TestRunRefuses(t *testing.T) {
	st := &State{Version: stateVersion, Flow: "A->B", Groups: []string{"g"}}
	for _, tt := range []struct {
		name string
		o    Options
		want error
		msg  string
	}{
		{name: "no group", o: Options{Flow: "A->B"}, msg: "no consumer group"},
		{name: "another flow", o: Options{Flow: "A->C", Groups: []string{"g"}}, want: ErrStateMismatch},
		{name: "other groups", o: Options{Flow: "A->B", Groups: []string{"g", "h"}}, want: ErrStateMismatch},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Run(context.Background(), tt.o, st)
			require.Error(t, err)
			if tt.want != nil {
				require.ErrorIs(t, err, tt.want)
			}
			require.ErrorContains(t, err, tt.msg)
		})
	}
}

func TestEnds(t *testing.T) {
	tp := func(p int32) checkpoint.TopicPartition { return checkpoint.TopicPartition{Topic: "t", Partition: p} }
	for _, tt := range []struct {
		name    string
		a, b    map[checkpoint.TopicPartition]int64
		equal   bool
		written int64
	}{
		{name: "first look", a: nil, b: map[checkpoint.TopicPartition]int64{tp(0): 5}, written: 0},
		{name: "unchanged", a: map[checkpoint.TopicPartition]int64{tp(0): 5, tp(1): 7}, b: map[checkpoint.TopicPartition]int64{tp(0): 5, tp(1): 7}, equal: true},
		{name: "written", a: map[checkpoint.TopicPartition]int64{tp(0): 5, tp(1): 7}, b: map[checkpoint.TopicPartition]int64{tp(0): 9, tp(1): 8}, written: 5},
		{name: "partition added", a: map[checkpoint.TopicPartition]int64{tp(0): 5}, b: map[checkpoint.TopicPartition]int64{tp(0): 5, tp(1): 3}, written: 0},
		{name: "truncated", a: map[checkpoint.TopicPartition]int64{tp(0): 5}, b: map[checkpoint.TopicPartition]int64{tp(0): 2}, written: 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.equal, equalEnds(tt.a, tt.b))
			require.Equal(t, tt.written, sumDiff(tt.a, tt.b))
		})
	}
}

func TestWriteReport(t *testing.T) {
	at := time.Date(2026, 12, 3, 1, 0, 0, 0, time.UTC)
	fin := at.Add(4 * time.Second)
	st := &State{Flow: "A->B", Groups: []string{"g"}, Topics: []string{"t"}, Started: at, Finished: &fin,
		Steps: []Step{{Name: StepDrain, Started: at, Done: at.Add(2 * time.Second), Detail: "drained"}},
		Fence: &Fence{Principals: []string{"User:app"}, Host: "*", Topics: []string{"t"}, Created: at},
		Ends:  []PartitionEnd{{Topic: "t", Partition: 0, End: 10}, {Topic: "t", Partition: 1, End: 5}},
		Offsets: []GroupResult{{Group: "g", How: howCommitted, LocalInitialized: 2,
			Offsets: []GroupOffset{{Topic: "t", Partition: 0, SourceOffset: 10, RemoteTopic: "A.t", TargetOffset: 11, Mode: "exact"}}}},
		Verify: &VerifySummary{Since: at, Partitions: 2, Matched: 15, OK: true}}
	var b bytes.Buffer
	require.NoError(t, WriteReport(&b, st))
	for _, want := range []string{
		"flow:     A->B", "finished: 2026-12-03T01:00:04Z (4s)", "drain", "2s", "drained",
		"DENY WRITE for User:app", "still in place", "2 partitions, 15 offsets",
		"group g: offsets committed; 2 partitions of local topics", "t[0]", "A.t[0]", "11", "exact",
		"15 matched, 0 missing, 0 duplicated, 0 differing, 0 extra: OK",
	} {
		require.Contains(t, b.String(), want)
	}
}
