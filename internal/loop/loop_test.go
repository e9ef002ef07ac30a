package loop

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

func TestBackoff(t *testing.T) {
	b := Backoff{Min: time.Second, Max: 5 * time.Second}
	var got []time.Duration
	for range 5 {
		got = append(got, b.Next())
	}
	require.Equal(t, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}, got)
	b.Reset()
	require.Equal(t, time.Second, b.Next())
	require.Zero(t, (&Backoff{}).Next())
}

func TestEvery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		var n atomic.Int32
		done := make(chan struct{})
		go func() { Every(ctx, time.Second, func(context.Context) { n.Add(1) }); close(done) }()
		time.Sleep(3500 * time.Millisecond)
		synctest.Wait()
		require.EqualValues(t, 3, n.Load()) // at 1, 2 and 3 s; none at once
		cancel()
		<-done
	})
}

func TestSleep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		start := time.Now()
		require.True(t, Sleep(ctx, time.Minute))
		require.Equal(t, time.Minute, time.Since(start))
		go func() { time.Sleep(time.Second); cancel() }()
		require.False(t, Sleep(ctx, time.Minute))
		require.Equal(t, time.Minute+time.Second, time.Since(start))
		require.False(t, Sleep(ctx, 0))
	})
}
