package main

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mm2go/mm2go/checkpoint"
)

func TestWhyNotSafe(t *testing.T) {
	for _, tc := range []struct {
		name string
		fs   []checkpoint.Failure
		want string
	}{
		{"safe", nil, "safe to switch"},
		{"behind, summed over partitions", []checkpoint.Failure{
			{Topic: "t", Partition: 0, Reason: checkpoint.ReasonTargetMissing, Detail: "x"},
			{Topic: "t", Partition: 0, Reason: checkpoint.ReasonReplicationBehind, Behind: 5},
			{Topic: "t", Partition: 1, Reason: checkpoint.ReasonReplicationBehind, Behind: 2},
		}, "not safe: replication behind by 7 records"},
		{"first failure otherwise", []checkpoint.Failure{
			{Topic: "t", Partition: 3, Reason: checkpoint.ReasonTargetDiffers, Detail: "target group at 4, translated 9"},
			{Partition: -1, Reason: checkpoint.ReasonGroupActive, Detail: "2 members"},
		}, "not safe: target offset differs (t-3): target group at 4, translated 9"},
		{"whole group", []checkpoint.Failure{{Partition: -1, Reason: checkpoint.ReasonSourceActive, Detail: "3 members on the source"}},
			"not safe: source group active: 3 members on the source"},
	} {
		t.Run(tc.name, func(t *testing.T) { require.Equal(t, tc.want, whyNotSafe(tc.fs)) })
	}
}

func TestStatusPageOnlyAtRoot(t *testing.T) {
	d := &daemon{}
	rec := httptest.NewRecorder()
	d.statusPage(rec, httptest.NewRequest(http.MethodGet, "/nothing-here", nil))
	require.Equal(t, http.StatusNotFound, rec.Code)
}
