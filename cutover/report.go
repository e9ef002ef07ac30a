package cutover

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteReport writes the cutover's report as text, for a change ticket:
// the steps with their times, the fence, the final ends, each group's
// offsets and the verification.
func WriteReport(w io.Writer, st *State) error {
	var b strings.Builder
	fmt.Fprintf(&b, "mm2go cutover report\n")
	fmt.Fprintf(&b, "flow:     %s\n", st.Flow)
	fmt.Fprintf(&b, "groups:   %s\n", strings.Join(st.Groups, ", "))
	fmt.Fprintf(&b, "topics:   %s\n", strings.Join(st.Topics, ", "))
	fmt.Fprintf(&b, "started:  %s\n", st.Started.Format(time.RFC3339Nano))
	if st.Finished != nil {
		fmt.Fprintf(&b, "finished: %s (%s)\n", st.Finished.Format(time.RFC3339Nano), st.Finished.Sub(st.Started).Round(time.Millisecond))
	} else {
		fmt.Fprintf(&b, "finished: no (%d of 6 steps done)\n", len(st.Steps))
	}
	b.WriteString("\nsteps:\n")
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	for _, s := range st.Steps {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", s.Name, s.Done.Format("15:04:05.000"), s.Done.Sub(s.Started).Round(time.Millisecond), s.Detail)
	}
	_ = tw.Flush()
	if f := st.Fence; f != nil {
		fmt.Fprintf(&b, "\nfence: DENY WRITE for %s from host %s on %s of the source, created %s",
			strings.Join(f.Principals, ", "), f.Host, count(len(f.Topics), "topic"), f.Created.Format(time.RFC3339))
		if f.Removed != nil {
			fmt.Fprintf(&b, ", removed %s\n", f.Removed.Format(time.RFC3339))
		} else {
			b.WriteString("; still in place (mm2go cutover --unfence removes exactly these ACLs)\n")
		}
	}
	if len(st.Ends) > 0 {
		var total int64
		for _, e := range st.Ends {
			total += e.End
		}
		fmt.Fprintf(&b, "\nfinal source end offsets: %s, %d offsets in all (the state file lists each)\n", count(len(st.Ends), "partition"), total)
	}
	for _, g := range st.Offsets {
		fmt.Fprintf(&b, "\ngroup %s: offsets %s; %s of local topics initialized at their log start\n", g.Group, g.How, count(g.LocalInitialized, "partition"))
		tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
		fmt.Fprintf(tw, "  source partition\tsource offset\ttarget partition\ttarget offset\tmode\n")
		for _, o := range g.Offsets {
			fmt.Fprintf(tw, "  %s[%d]\t%d\t%s[%d]\t%d\t%s\n", o.Topic, o.Partition, o.SourceOffset, o.RemoteTopic, o.Partition, o.TargetOffset, o.Mode)
		}
		_ = tw.Flush()
	}
	if v := st.Verify; v != nil {
		fmt.Fprintf(&b, "\nverify (records since %s): %s, %d matched, %d missing, %d duplicated, %d differing, %d extra: %s\n",
			v.Since.Format(time.RFC3339), count(v.Partitions, "partition"), v.Matched, v.Missing, v.Duplicated, v.Differing, v.Extra, map[bool]string{true: "OK", false: "NOT OK"}[v.OK])
		for _, p := range v.Problems {
			fmt.Fprintf(&b, "  %s\n", p)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
