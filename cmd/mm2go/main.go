// Command mm2go replicates Kafka topics between clusters, configured by
// Apache Kafka MirrorMaker 2's own properties file.
//
//	mm2go -c connect-mirror-maker.properties   run every enabled flow
//	mm2go demo                                 replicate between two in-process clusters
//	mm2go validate -c FILE                     check a file and print the effective flows
//
// Run `mm2go help` for every subcommand and flag.
package main

import "os"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}
