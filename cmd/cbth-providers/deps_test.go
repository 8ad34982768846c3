package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/cbth-dev/cbth/adapters/cortexfs/driver/provider"
)

// sdkPrefixes are import paths that must stay out of cbth: the provider
// SDKs and what they drag in (grpc, protobuf, opencensus), and the
// keychain client. They belong to cbth-providers only.
var sdkPrefixes = []string{
	"github.com/openai/",
	"github.com/anthropics/",
	"google.golang.org/genai",
	"google.golang.org/grpc",
	"google.golang.org/protobuf",
	"go.opencensus.io",
	"cloud.google.com/",
	"github.com/zalando/go-keyring",
	"github.com/godbus/",
}

func deps(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
	}
	return strings.Fields(string(out))
}

// TestCbthDoesNotLinkSDKs fails when cmd/cbth depends on a provider SDK
// again: cbth starts for every job command, ctx call and object run, and
// the SDKs cost each start milliseconds of init and tens of MB of binary.
func TestCbthDoesNotLinkSDKs(t *testing.T) {
	for _, d := range deps(t, "github.com/cbth-dev/cbth/cmd/cbth") {
		for _, p := range sdkPrefixes {
			if strings.HasPrefix(d, p) {
				t.Errorf("cmd/cbth depends on %s; provider SDKs belong behind cbth-providers", d)
			}
		}
		if d == "github.com/cbth-dev/cbth/adapters/cortexfs/driver/all" || d == "github.com/cbth-dev/cbth/adapters/cortexfs/cred" {
			t.Errorf("cmd/cbth depends on %s, which is for cbth-providers only", d)
		}
	}
}

// The helper does carry them (else the test above proves nothing about
// the list).
func TestHelperLinksSDKs(t *testing.T) {
	all := strings.Join(deps(t, "github.com/cbth-dev/cbth/cmd/cbth-providers"), "\n")
	for _, p := range []string{"github.com/openai/", "github.com/anthropics/", "google.golang.org/genai", "github.com/zalando/go-keyring"} {
		if !strings.Contains(all, "\n"+p) {
			t.Errorf("cbth-providers does not depend on %s", p)
		}
	}
}

// Each SDK helper links its own SDK and no other: it starts for every
// call through that SDK, and each SDK linked runs its package
// initializers at every start (the gemini SDK's pull gRPC, protobuf,
// OpenCensus and go-cmp).
func TestSDKHelpersLinkOneSDK(t *testing.T) {
	sdk := map[string]string{
		provider.HelperOpenAI:    "github.com/openai/",
		provider.HelperAnthropic: "github.com/anthropics/",
		provider.HelperGemini:    "google.golang.org/genai",
	}
	for h := range provider.SDKHelpers {
		all := "\n" + strings.Join(deps(t, "github.com/cbth-dev/cbth/cmd/"+h), "\n")
		for other, p := range sdk {
			if linked := strings.Contains(all, "\n"+p); linked != (other == h) {
				t.Errorf("%s links %s: %v", h, p, linked)
			}
		}
		if strings.Contains(all, "\ngithub.com/cbth-dev/cbth/adapters/cortexfs/driver/all\n") {
			t.Errorf("%s links driver/all, which carries every SDK", h)
		}
	}
}
