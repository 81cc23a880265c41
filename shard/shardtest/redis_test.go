package shardtest

import (
	"strings"
	"testing"
)

// TestAbsentRedisSkipsUnlessRequired: without redis-server a test is
// skipped when run by hand, and fails under make test
// (SHARDSTOCK_TEST_REQUIRE_ALL=1), which must not pass by skipping.
func TestAbsentRedisSkipsUnlessRequired(t *testing.T) {
	cases := []struct {
		name, requireAll string
		fail             bool
	}{
		{"by hand", "", false},
		{"required", "1", true},
		{"other value", "0", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			msg, fail := absent(tc.requireAll)
			if fail != tc.fail {
				t.Errorf("absent(%q) fails = %v, want %v", tc.requireAll, fail, tc.fail)
			}
			if !strings.Contains(msg, "deploy/redis.sh install") {
				t.Errorf("absent(%q) = %q: does not say how to install redis-server", tc.requireAll, msg)
			}
		})
	}
}
