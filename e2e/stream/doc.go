// Package stream holds the end-to-end tests of the NameTable stream: two
// control planes in-process (controlplane.New and Run, reading one entries
// folder), agents in-process (agent.New and Run) connected to them over
// real gRPC on loopback, a test upstream DNS server, and DNS questions over
// real UDP. The tests cover failover between the control planes, a restart
// from the persisted table, a bad entries file and namespace scoping;
// e2e/README.md lists what they prove. The package has no code besides the
// tests.
package stream
