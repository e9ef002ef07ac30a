package fence

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestDescribe: the status of a flow's group names its members by instance
// id, the one running the task first, and the tasks nobody runs.
func TestDescribe(t *testing.T) {
	seeds := leaseCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	require.NoError(t, err)
	defer cl.Close()
	adm := kadm.NewClient(cl)

	st, err := Describe(ctx, adm, "g", "lease")
	require.NoError(t, err)
	require.Empty(t, st.State, "no instance ever ran the flow")
	require.Equal(t, 1, st.Tasks)
	require.Equal(t, []int32{0}, st.Unowned())

	a := joinAs(t, seeds, "g", "lease", "host-b")
	defer a.Close()
	ga, err := a.Wait(ctx)
	require.NoError(t, err)
	defer ga.Release()
	b := joinAs(t, seeds, "g", "lease", "host-a")
	defer b.Close()
	require.Eventually(t, b.Standing, 30*time.Second, 50*time.Millisecond)

	require.Eventually(t, func() bool {
		st, err = Describe(ctx, adm, "g", "lease")
		return err == nil && st.State == "Stable" && len(st.Members) == 2
	}, 30*time.Second, 50*time.Millisecond)
	require.Equal(t, "host-b", st.Members[0].InstanceID, "the first member runs the task")
	require.Equal(t, []int32{0}, st.Members[0].Tasks)
	require.Equal(t, "host-a", st.Members[1].InstanceID)
	require.Empty(t, st.Members[1].Tasks)
	require.Empty(t, st.Unowned())
}
