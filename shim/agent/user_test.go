package agent

import (
	"slices"
	"strings"
	"testing"
)

// TestResolveUserGroupAdd: --group-add's groups join the user's, by
// name or number as the group file has them, else by any number in
// range, and an unknown name fails in dockerd's words.
func TestResolveUserGroupAdd(t *testing.T) {
	const passwd = "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/sh\n"
	const group = "root:x:0:\nwheel:x:10:nobody\naudio:x:29:\nnogroup:x:65534:\n"
	for _, tc := range []struct {
		name     string
		user     string
		groupAdd []string
		want     []int
		wantErr  string
	}{
		{"none", "", nil, []int{0}, ""},
		{"by name", "", []string{"audio"}, []int{0, 29}, ""},
		{"by number in the file", "", []string{"29"}, []int{0, 29}, ""},
		{"by number not in the file", "", []string{"1234"}, []int{0, 1234}, ""},
		{"beside the user's memberships", "nobody", []string{"audio", "7"}, []int{10, 65534, 29, 7}, ""},
		{"one the user has already", "nobody", []string{"wheel"}, []int{10, 65534}, ""},
		{"with an explicit group", "nobody:audio", []string{"wheel"}, []int{29, 10}, ""},
		{"unknown name", "", []string{"nosuch"}, nil, "Unable to find group nosuch: no matching entries in group file"},
		{"out of range", "", []string{"4294967296"}, nil, "uids and gids must be in range 0-2147483647"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u, err := resolveUser(tc.user, tc.groupAdd, strings.NewReader(passwd), strings.NewReader(group))
			if tc.wantErr != "" {
				if _, ok := err.(*userError); !ok || err.Error() != tc.wantErr {
					t.Fatalf("error %v, want the user error %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(u.Groups, tc.want) {
				t.Errorf("groups %v, want %v", u.Groups, tc.want)
			}
		})
	}
}
