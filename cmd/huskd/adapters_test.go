package main

import (
	"encoding/json"
	"testing"
)

// TestRegistryConfig: docker info's RegistryConfig has dockerd's shape:
// loopback and any CIDR given as insecure, Docker Hub's index, and an
// insecure index per registry named. Clients read it (docker info
// templates, SDKs deciding whether to speak HTTP); it used to be null.
func TestRegistryConfig(t *testing.T) {
	b, err := json.Marshal(registryConfig([]string{"reg.local:5000", "10.1.0.0/16", "127.0.0.0/8"}))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"InsecureRegistryCIDRs":["::1/128","127.0.0.0/8","10.1.0.0/16"],` +
		`"IndexConfigs":{"docker.io":{"Name":"docker.io","Mirrors":[],"Secure":true,"Official":true},` +
		`"reg.local:5000":{"Name":"reg.local:5000","Mirrors":[],"Secure":false,"Official":false}},"Mirrors":[]}`
	if string(b) != want {
		t.Errorf("RegistryConfig =\n%s\nwant\n%s", b, want)
	}
}
