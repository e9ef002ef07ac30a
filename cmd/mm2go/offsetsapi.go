package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"

	"github.com/mm2go/mm2go/checkpoint"
	"github.com/mm2go/mm2go/config"
	"github.com/mm2go/mm2go/internal/itopic"
	"github.com/mm2go/mm2go/policy"
)

// Translated offsets as `mm2go offsets translate --json` prints them and
// GET /api/v1/offsets returns them: what applications that keep their own
// offsets (Spark, Flink) call MM2's RemoteClusterUtils.translateOffsets for.

// translatedOffsets is the JSON document.
type translatedOffsets struct {
	Flow    string             `json:"flow"`
	Offsets []translatedOffset `json:"offsets"`
}

// translatedOffset is one group's offset of one source partition.
type translatedOffset struct {
	Group        string `json:"group"`
	Topic        string `json:"topic"`
	Partition    int32  `json:"partition"`
	SourceOffset int64  `json:"source_offset"`
	RemoteTopic  string `json:"remote_topic"`
	// TargetOffset is null when nothing of the partition was replicated.
	TargetOffset *int64 `json:"target_offset"`
	// Mode is how the target offset was derived: exact, gap, beyond,
	// before, approximate; unknown when TargetOffset is null.
	Mode string `json:"mode"`
}

// groupsMatching lists the source's consumer groups and returns those
// match selects, sorted.
func groupsMatching(ctx context.Context, srcAdm *kadm.Client, match func(string) bool) ([]string, error) {
	listed, err := srcAdm.ListGroups(ctx)
	if err != nil {
		return nil, fmt.Errorf("list the source's groups: %w", err)
	}
	var out []string
	for _, g := range listed.Groups() {
		if match(g) {
			out = append(out, g)
		}
	}
	slices.Sort(out)
	return out, nil
}

// translateGroups translates the committed offsets of groups on the source
// (topic "": of every replicated topic) with idx, in the order of groups,
// each by topic and partition.
func translateGroups(ctx context.Context, srcAdm *kadm.Client, idx *checkpoint.Index, sel policy.TopicSelector, source string, groups []string, topic string) ([]translatedOffset, error) {
	out := []translatedOffset{}
	for _, g := range groups {
		offs, err := checkpoint.Translate(ctx, srcAdm, idx, sel, source, g, topic)
		if err != nil {
			return nil, err
		}
		out = append(out, translated(g, offs)...)
	}
	return out, nil
}

// translated converts the translations of group's offsets.
func translated(group string, offs []checkpoint.GroupOffset) []translatedOffset {
	out := make([]translatedOffset, 0, len(offs))
	for _, o := range offs {
		t := translatedOffset{Group: group, Topic: o.Topic, Partition: o.Partition, SourceOffset: o.SourceOffset,
			RemoteTopic: o.RemoteTopic, Mode: "unknown"}
		if o.Known {
			down := o.Translation.Downstream
			t.TargetOffset, t.Mode = &down, o.Translation.Mode.String()
		}
		out = append(out, t)
	}
	return out
}

// groupFilter compiles --groups / group=: comma-separated regular
// expressions in Java's syntax, as MM2's groups key.
func groupFilter(patterns string) (*policy.Filter, error) {
	if strings.TrimSpace(patterns) == "" {
		return nil, errors.New("no group pattern")
	}
	return policy.NewFilter(strings.Split(patterns, ","), nil)
}

// apiOffsetsTimeout bounds one GET /api/v1/offsets.
const apiOffsetsTimeout = 30 * time.Second

// offsetsAPI serves GET /api/v1/offsets?flow=A->B&group=RE: the translated
// offsets of the flow's source groups matching RE (comma-separated Java
// regular expressions), with the same document as `mm2go offsets
// translate --groups RE --json`. flow may be left out when one flow runs.
func (d *daemon) offsetsAPI(w http.ResponseWriter, req *http.Request) {
	fail := func(code int, format string, args ...any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = writeJSON(w, map[string]string{"error": fmt.Sprintf(format, args...)})
	}
	if req.Method != http.MethodGet {
		fail(http.StatusMethodNotAllowed, "only GET")
		return
	}
	q := req.URL.Query()
	filter, err := groupFilter(q.Get("group"))
	if err != nil {
		fail(http.StatusBadRequest, "group: %v", err)
		return
	}
	fr, why := d.apiFlow(q.Get("flow"))
	if fr == nil {
		fail(http.StatusNotFound, "%s", why)
		return
	}
	srcAdm := fr.probeSrc.Load()
	if srcAdm == nil {
		fail(http.StatusServiceUnavailable, "flow %s is not running here", fr.flow.Name())
		return
	}
	ctx, cancel := context.WithTimeout(req.Context(), apiOffsetsTimeout)
	defer cancel()
	doc, err := fr.translate(ctx, srcAdm, filter.Match)
	if err != nil {
		fail(http.StatusBadGateway, "%v", err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = writeJSON(w, doc)
}

// apiFlow returns the enabled flow named name, or the only one when name
// is "", else why not.
func (d *daemon) apiFlow(name string) (*flowRunner, string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var enabled []*flowRunner
	for n, h := range d.flows {
		if !h.fr.flow.Enabled {
			continue
		}
		if n == name {
			return h.fr, ""
		}
		enabled = append(enabled, h.fr)
	}
	switch {
	case name != "":
		return nil, fmt.Sprintf("flow %q does not run here", name)
	case len(enabled) == 1:
		return enabled[0], ""
	default:
		return nil, "flow=SOURCE->TARGET is required: several flows run here"
	}
}

// readIndex loads the flow's offset map with a reader of its own, whose
// client id ends in "-"+use; warn names a gap it could not read.
func (fr *flowRunner) readIndex(ctx context.Context, use string) (idx *checkpoint.Index, sel policy.TopicSelector, warn, err error) {
	f := fr.flow
	reader, err := fr.client(config.RoleTargetConsumer, append(itopic.ReaderOpts(), kgo.ClientID(f.Client(config.RoleTargetConsumer).ID+"-"+use))...)
	if err != nil {
		return nil, sel, nil, err
	}
	defer reader.Close()
	if sel, err = selectorFor(f); err != nil {
		return nil, sel, nil, err
	}
	idx, warn, err = loadIndex(ctx, reader, f, sel)
	return idx, sel, warn, err
}

// translate loads the flow's offset map with a reader of its own and
// translates the offsets of the source groups match selects.
func (fr *flowRunner) translate(ctx context.Context, srcAdm *kadm.Client, match func(string) bool) (*translatedOffsets, error) {
	f := fr.flow
	idx, sel, warn, err := fr.readIndex(ctx, "api")
	if err != nil {
		return nil, err
	}
	if warn != nil {
		fr.log.Warn("offsets API", zap.Error(warn))
	}
	groups, err := groupsMatching(ctx, srcAdm, match)
	if err != nil {
		return nil, err
	}
	offs, err := translateGroups(ctx, srcAdm, idx, sel, f.Source, groups, "")
	if err != nil {
		return nil, err
	}
	return &translatedOffsets{Flow: f.Name(), Offsets: offs}, nil
}

// writeJSON writes v indented, as the commands print JSON, with "->" of
// flow names as it is.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// runTranslate is `mm2go offsets translate` with --groups or --json: the
// offsets of one group (group) or of every source group matching groups,
// as tables or as JSON.
func runTranslate(ff flowFlags, group, groups, topic string, asJSON bool, stdout, stderr io.Writer) int {
	if (group == "") == (groups == "") {
		_, _ = fmt.Fprintln(stderr, "mm2go: give either --group or --groups")
		return exitUsage
	}
	match := func(g string) bool { return g == group }
	if groups != "" {
		filter, err := groupFilter(groups)
		if err != nil {
			_, _ = fmt.Fprintf(stderr, "mm2go: --groups: %v\n", err)
			return exitUsage
		}
		match = filter.Match
	}
	of, code := ff.open(stderr)
	if of == nil {
		return code
	}
	defer of.close()
	ctx, cancel := context.WithTimeout(context.Background(), ff.timeout)
	defer cancel()
	idx, err := of.loadIndex(ctx, stderr)
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "mm2go: %v\n", err)
		return exitFailure
	}
	names := []string{group}
	if groups != "" {
		if names, err = groupsMatching(ctx, of.srcAdm, match); err != nil {
			_, _ = fmt.Fprintf(stderr, "mm2go: %v\n", err)
			return exitFailure
		}
	}
	offs, err := translateGroups(ctx, of.srcAdm, idx, of.sel, of.flow.Source, names, topic)
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "mm2go: %v\n", err)
		return exitFailure
	}
	if asJSON {
		_ = writeJSON(stdout, &translatedOffsets{Flow: of.flow.Name(), Offsets: offs})
		return exitOK
	}
	for _, g := range names {
		var rows []translatedOffset
		for _, o := range offs {
			if o.Group == g {
				rows = append(rows, o)
			}
		}
		printTranslations(stdout, of.flow.Name(), g, rows)
	}
	return exitOK
}
