package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// toolRun is one finished perf-tool process.
type toolRun struct {
	wall   time.Duration
	cpu    time.Duration // user+sys of the process tree (wait4 rusage)
	maxRSS int64         // bytes, largest process of the tree
	result string        // its RESULT line
	err    error
}

// runTool runs testbed/perf.sh with args to completion.
func (b *bench) runTool(ctx context.Context, dir, label string, args ...string) toolRun {
	cmd := b.tb.cmd(ctx, nil, "perf.sh", args...)
	var stdout bytes.Buffer
	logf, err := os.Create(filepath.Join(dir, label+".log"))
	if err != nil {
		return toolRun{err: err}
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = &stdout, logf
	t0 := time.Now()
	err = cmd.Run()
	tr := toolRun{wall: time.Since(t0)}
	fmt.Fprintf(logf, "\n--- stdout ---\n%s", stdout.String())
	if st := cmd.ProcessState; st != nil {
		tr.cpu = st.UserTime() + st.SystemTime()
		if ru, ok := st.SysUsage().(*syscall.Rusage); ok {
			tr.maxRSS = ru.Maxrss << 10
		}
	}
	for line := range strings.SplitSeq(stdout.String(), "\n") {
		if strings.HasPrefix(line, "RESULT ") {
			tr.result = line
		}
	}
	switch {
	case err != nil:
		tr.err = fmt.Errorf("perf.sh %s: %w", args[0], err)
	case tr.result == "":
		tr.err = fmt.Errorf("perf.sh %s printed no RESULT line (see %s.log)", args[0], label)
	}
	return tr
}

// resultField returns the value of key=value in a RESULT line.
func resultField(line, key string) (float64, bool) {
	for f := range strings.FieldsSeq(line) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			x, err := strconv.ParseFloat(v, 64)
			return x, err == nil
		}
	}
	return 0, false
}

// perfTool runs one raw-limit measurement with Kafka's perf tools:
// perf-produce writes as many records of the value size as the backlog holds
// to a fresh topic on the target; perf-consume reads the whole backlog from
// the source; perf-copy does both at once (the two sides of a copy sharing
// the machine, as a replicator's do). Wall time is that of the tool
// processes, JVM start included; figures count the backlog's payload.
func (b *bench) perfTool(ctx context.Context, name string, round int) (res runResult) {
	id := newID()
	topic := "perf" + id
	res = runResult{Phase: "backlog", Contender: name, Round: round, Records: b.src.records, Bytes: b.src.bytes, Syncs: -1}
	dir := filepath.Join(b.out, "runs", fmt.Sprintf("backlog-%s-r%d-%s", name, round, id))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		res.Err = err.Error()
		return res
	}
	defer func() {
		if _, err := b.dstAdm.DeleteTopics(context.WithoutCancel(ctx), topic); err != nil {
			b.logf("cleanup: delete %s: %v", topic, err)
		}
		res.LoadAfter = loadAvg()
	}()
	n := strconv.FormatInt(b.src.records, 10)
	if name != perfConsume {
		if _, err := b.dstAdm.CreateTopic(ctx, int32(b.o.partitions), 1, nil, topic); err != nil {
			res.Err = fmt.Sprintf("create %s: %v", topic, err)
			return res
		}
		if name == perfProduce {
			// Produce only the value: payload is value-size per record.
			res.Bytes = b.src.records * int64(b.o.valueSize)
		}
	}
	produceArgs := append([]string{"produce", strings.Join(b.dstSeeds, ","), topic, n, strconv.Itoa(b.o.valueSize)},
		strings.Fields(b.o.perfProducer)...)
	consumeArgs := []string{"consume", strings.Join(b.srcSeeds, ","), b.src.name, n}

	res.LoadBefore = loadAvg()
	srcCPU0, dstCPU0 := b.brokerCPU()
	res.Start = time.Now()
	var runs []toolRun
	switch name {
	case perfProduce:
		runs = append(runs, b.runTool(ctx, dir, "produce", produceArgs...))
	case perfConsume:
		runs = append(runs, b.runTool(ctx, dir, "consume", consumeArgs...))
	case perfCopy:
		ch := make(chan toolRun, 1)
		go func() { ch <- b.runTool(ctx, dir, "produce", produceArgs...) }()
		c := b.runTool(ctx, dir, "consume", consumeArgs...)
		runs = append(runs, <-ch, c)
	}
	srcCPU1, dstCPU1 := b.brokerCPU()
	res.SrcBrokerCPU, res.DstBrokerCPU = srcCPU1-srcCPU0, dstCPU1-dstCPU0
	var notes []string
	for _, tr := range runs {
		if tr.err != nil {
			res.Err = tr.err.Error()
			return res
		}
		res.Wall = max(res.Wall, tr.wall)
		res.CPU += tr.cpu
		res.PeakRSS += tr.maxRSS
		if v, ok := resultField(tr.result, "records_per_sec"); ok && strings.HasPrefix(tr.result, "RESULT produce") {
			notes = append(notes, fmt.Sprintf("tool: produce %.0f rec/s", v))
		}
		if v, ok := resultField(tr.result, "fetch_records_per_sec"); ok {
			notes = append(notes, fmt.Sprintf("tool: consume fetch %.0f rec/s", v))
		}
	}
	res.Note = strings.Join(notes, ", ")
	if name != perfProduce {
		// ConsumerPerformance stops after the asked count (it may read a
		// few more); the backlog is unchanged, so nothing to verify.
		if v, ok := resultField(runs[len(runs)-1].result, "records"); !ok || int64(v) < b.src.records {
			res.Err = fmt.Sprintf("consumer read %.0f records, want %d", v, b.src.records)
			return res
		}
	}
	if name != perfConsume {
		pr, err := b.topicCount(ctx, topic)
		if err != nil || pr != b.src.records {
			res.Err = fmt.Sprintf("target topic holds %d records, want %d (%v)", pr, b.src.records, err)
			return res
		}
	}
	res.OK = true
	return res
}

// topicCount sums the end offsets of a target topic.
func (b *bench) topicCount(ctx context.Context, topic string) (int64, error) {
	lo, err := b.dstAdm.ListEndOffsets(ctx, topic)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, o := range lo[topic] {
		if o.Err != nil {
			return n, o.Err
		}
		n += o.Offset
	}
	return n, nil
}
