package config

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestJavaHashSetOrder compares with the iteration order Java 17's
// new HashSet<>(Arrays.asList(...)) printed for the same inputs (jshell).
func TestJavaHashSetOrder(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"primary,secondary", "secondary,primary"},
		{"secondary,primary", "secondary,primary"},
		{"A,B", "A,B"},
		{"a,b,c", "a,b,c"},
		{"c,b,a", "a,b,c"},
		{"central,local_one,local_two,beats_emitter", "beats_emitter,central,local_two,local_one"},
		{"us-east,us-west,eu-central,ap-south,backup", "ap-south,backup,us-east,eu-central,us-west"},
		// "Aa" and "BB" share a hash code: insertion order decides.
		{"BB,Aa,x", "BB,Aa,x"},
		{"Aa,BB,x", "Aa,BB,x"},
		// 20 aliases: a 32-bucket table.
		{"c0,c1,c2,c3,c4,c5,c6,c7,c8,c9,c10,c11,c12,c13,c14,c15,c16,c17,c18,c19",
			"c11,c10,c13,c12,c15,c14,c17,c16,c19,c18,c0,c1,c2,c3,c4,c5,c6,c7,c8,c9"},
		{"dc-1,dc-2,dc-10,DC3,élan", "dc-10,DC3,dc-2,élan,dc-1"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			require.Equal(t, tt.want, strings.Join(javaHashSetOrder(strings.Split(tt.in, ",")), ","))
		})
	}
}

// TestFlowsFollowClusterPairsOrder checks Config.Flows: every ordered pair,
// in MM2's clusterPairs order, enabled or not.
func TestFlowsFollowClusterPairsOrder(t *testing.T) {
	c, _ := mustLoad(t, `
clusters = central, local_one, local_two
central.bootstrap.servers = c:9092
local_one.bootstrap.servers = l1:9092
local_two.bootstrap.servers = l2:9092
central->local_one.enabled = true
`)
	var names []string
	for _, f := range c.Flows {
		names = append(names, f.Name())
	}
	// HashSet order of the three aliases is central, local_two, local_one.
	require.Equal(t, []string{
		"central->local_two", "central->local_one",
		"local_two->central", "local_two->local_one",
		"local_one->central", "local_one->local_two",
	}, names)
	require.Len(t, c.EnabledFlows(), 1)
	require.Equal(t, "central->local_one", c.EnabledFlows()[0].Name())
	require.Equal(t, []string{"central", "local_one", "local_two"},
		[]string{c.Clusters[0].Alias, c.Clusters[1].Alias, c.Clusters[2].Alias}, "Clusters keep the file order")
	require.NotNil(t, c.Flow("local_two", "central"))
	require.Nil(t, c.Flow("central", "central"))
	require.Nil(t, c.Flow("central", "nowhere"))
	require.Equal(t, "c:9092", c.Cluster("central").BootstrapServers[0])
	require.Nil(t, c.Cluster("nowhere"))
}

// TestActiveMatchesClusterPairs ports MirrorMakerConfigTest's cluster-pair
// counts: MM2 runs a herder for a pair iff the flow is enabled or emits
// heartbeats.
func TestActiveMatchesClusterPairs(t *testing.T) {
	base := func(clusters string, extra string) string {
		var sb strings.Builder
		sb.WriteString("clusters = " + clusters + "\n")
		for _, a := range strings.Split(clusters, ",") {
			sb.WriteString(strings.TrimSpace(a) + ".bootstrap.servers = h:9092\n")
		}
		return sb.String() + extra
	}
	tests := []struct {
		name   string
		text   string
		active int
	}{
		{"defaults", base("a, b, c", "a->b.enabled = true\n"), 6},
		{"global heartbeats off", base("a, b, c", "emit.heartbeats.enabled = false\na->b.enabled = true\n"), 1},
		{"two pairs without heartbeats", base("a, b, c", "a->b.emit.heartbeats.enabled = false\na->c.emit.heartbeats.enabled = false\nb->c.enabled = true\n"), 4},
		{"globally disabled heartbeats", base("a, b, c, d, e, f",
			"emit.heartbeats.enabled = false\na->b.enabled = true\na->c.enabled = true\na->d.enabled = true\na->e.enabled = false\na->f.enabled = false\n"), 3},
		{"central local", base("central, local_one, local_two, beats_emitter",
			"emit.heartbeats.enabled = false\ncentral->local_one.enabled = true\ncentral->local_two.enabled = true\nbeats_emitter->central.emit.heartbeats.enabled = true\n"), 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _ := mustLoad(t, tt.text)
			active := 0
			for _, f := range c.Flows {
				if f.Active() {
					active++
				}
			}
			require.Equal(t, tt.active, active)
		})
	}
}
