package cutover

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// stateVersion is the version of the state file's layout.
const stateVersion = 1

// State is what a cutover has done so far, kept in the state file after
// every step so that a cutover started again with the same file continues
// where the last one stopped. It is also the cutover's report in JSON.
type State struct {
	Version int      `json:"version"`
	Flow    string   `json:"flow"`
	Groups  []string `json:"groups"`
	// Topics are the source topics the flow replicates, as preflight
	// found them: the ones fenced and waited for.
	Topics  []string  `json:"topics,omitempty"`
	Started time.Time `json:"started"`
	// Steps are the completed steps, in order.
	Steps []Step `json:"steps"`
	// Fence is the ACLs the fence step created (written before they are
	// created, so that --unfence removes them even after a crash).
	Fence *Fence `json:"fence,omitempty"`
	// Ends are the source's end offsets once nothing was written any more:
	// what replication had to reach.
	Ends []PartitionEnd `json:"final_source_ends,omitempty"`
	// Offsets are what the offsets step found and did, per group.
	Offsets []GroupResult `json:"offsets,omitempty"`
	// Verify summarises the verify step.
	Verify   *VerifySummary `json:"verify,omitempty"`
	Finished *time.Time     `json:"finished,omitempty"`
}

// Step is one completed step.
type Step struct {
	Name    string    `json:"name"`
	Started time.Time `json:"started"`
	Done    time.Time `json:"done"`
	Detail  string    `json:"detail"`
}

// Fence is a set of DENY WRITE ACLs on the source's topics.
type Fence struct {
	Principals []string `json:"principals"`
	Host       string   `json:"host"`
	Topics     []string `json:"topics"`
	// KeptOpen are the topics no ACL named before the fence: it allowed
	// every operation on them to User:* besides the DENY (--fence-keep-open).
	KeptOpen []string   `json:"kept_open,omitempty"`
	Created  time.Time  `json:"created"`
	Removed  *time.Time `json:"removed,omitempty"`
}

// PartitionEnd is a source partition's end offset.
type PartitionEnd struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	End       int64  `json:"end"`
}

// GroupResult is what the offsets step did for one group.
type GroupResult struct {
	Group string `json:"group"`
	// Offsets are the group's translated offsets on the target.
	Offsets []GroupOffset `json:"offsets"`
	// How says how the target group got them: "committed" by this
	// cutover, or "already there" (committed before, by mm2go's
	// group-offset sync, and its consumers may be reading already).
	How string `json:"how"`
	// LocalInitialized counts the partitions of local topics whose offsets
	// were set to their log start.
	LocalInitialized int `json:"local_topic_partitions_initialized"`
}

// GroupOffset is one translated offset.
type GroupOffset struct {
	Topic        string `json:"topic"`
	Partition    int32  `json:"partition"`
	SourceOffset int64  `json:"source_offset"`
	RemoteTopic  string `json:"remote_topic"`
	TargetOffset int64  `json:"target_offset"`
	Mode         string `json:"mode"`
}

// VerifySummary is the verify step's outcome.
type VerifySummary struct {
	Since      time.Time `json:"since"`
	Partitions int       `json:"partitions"`
	Matched    int64     `json:"matched"`
	Missing    int64     `json:"missing"`
	Duplicated int64     `json:"duplicated"`
	Differing  int64     `json:"differing"`
	Extra      int64     `json:"extra"`
	// Problems names the first partitions with findings.
	Problems []string `json:"problems,omitempty"`
	OK       bool     `json:"ok"`
}

// done returns the completed step named name, if any.
func (s *State) done(name string) (Step, bool) {
	i := slices.IndexFunc(s.Steps, func(st Step) bool { return st.Name == name })
	if i < 0 {
		return Step{}, false
	}
	return s.Steps[i], true
}

// LoadState reads a state file. A file that does not exist gives nil and
// no error.
func LoadState(path string) (*State, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("state file %s: %w", path, err)
	}
	if s.Version != stateVersion {
		return nil, fmt.Errorf("state file %s: version %d, this mm2go writes %d", path, s.Version, stateVersion)
	}
	return &s, nil
}

// Save writes the state file atomically: a crash leaves the old or the new
// one, never half of one.
func (s *State) Save(path string) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
