package cloudhypervisor

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
)

// specRel is where the reference copy of cloud-hypervisor's API
// description lives: in shared/reference/ beside the repository (not in
// it), found by walking up from the package directory.
const specRel = "shared/reference/cloud-hypervisor-v53.0-openapi.yaml"

// findSpec returns the API description's path, or "" with where it was
// looked for.
func findSpec() (string, string) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err.Error()
	}
	start := dir
	for {
		p := filepath.Join(dir, specRel)
		if _, err := os.Stat(p); err == nil {
			return p, ""
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Sprintf("no %s in %s or any directory above it (CI puts it in ../shared/reference/ beside the repository)", specRel, start)
		}
		dir = parent
	}
}

func needSpec(t *testing.T) string {
	t.Helper()
	p, where := findSpec()
	if p == "" {
		t.Skip("cloud-hypervisor contract tests need the API description: " + where)
	}
	return p
}

// spec is the API description, made strict: every object schema that
// lists its properties and says nothing of others refuses them, so a
// misspelt or invented field fails validation instead of passing unseen
// (cloud-hypervisor itself would reject or ignore it).
type spec struct {
	doc    *openapi3.T
	router routers.Router
}

func loadSpec(path string) (*spec, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromFile(path)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", path, err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		return nil, fmt.Errorf("validate %s: %w", path, err)
	}
	no := false
	seen := map[*openapi3.Schema]bool{}
	var strict func(s *openapi3.Schema)
	strict = func(s *openapi3.Schema) {
		if s == nil || seen[s] {
			return
		}
		seen[s] = true
		if len(s.Properties) > 0 && s.AdditionalProperties.Has == nil && s.AdditionalProperties.Schema == nil {
			s.AdditionalProperties.Has = &no
		}
		for _, p := range s.Properties {
			strict(p.Value)
		}
		if s.Items != nil {
			strict(s.Items.Value)
		}
		if s.AdditionalProperties.Schema != nil {
			strict(s.AdditionalProperties.Schema.Value)
		}
	}
	for _, s := range doc.Components.Schemas {
		strict(s.Value)
	}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("router for %s: %w", path, err)
	}
	return &spec{doc: doc, router: router}, nil
}

func validationOptions() *openapi3filter.Options {
	return &openapi3filter.Options{
		// Like cloud-hypervisor, refuse a body on actions that take none.
		RejectWhenRequestBodyNotSpecified: true,
		SkipSettingDefaults:               true,
		MultiError:                        true,
	}
}

// validateRequest checks r against the description and returns its
// validation input (for the answer's check) with r's body intact.
func (s *spec) validateRequest(ctx context.Context, r *http.Request) (*openapi3filter.RequestValidationInput, error) {
	route, params, err := s.router.FindRoute(r)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", r.Method, r.URL, err)
	}
	in := &openapi3filter.RequestValidationInput{Request: r, PathParams: params, Route: route, Options: validationOptions()}
	if err := openapi3filter.ValidateRequest(ctx, in); err != nil {
		return in, err
	}
	return in, nil
}

// validateResponse checks an answer to the request of in.
func validateResponse(ctx context.Context, in *openapi3filter.RequestValidationInput, status int, header http.Header, body []byte) error {
	return openapi3filter.ValidateResponse(ctx, &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 status,
		Header:                 header,
		Body:                   io.NopCloser(bytes.NewReader(body)),
		Options:                validationOptions(),
	})
}

// checkBody validates body as the request body of PUT endpoint.
func (s *spec) checkBody(endpoint string, body any) error {
	var rd io.Reader = http.NoBody
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	r, err := http.NewRequest(http.MethodPut, apiRoot+endpoint, rd)
	if err != nil {
		return err
	}
	if body != nil {
		r.Header.Set("Content-Type", "application/json")
	}
	_, err = s.validateRequest(context.Background(), r)
	return err
}
