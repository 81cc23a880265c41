package api

import "testing"

func TestPathFillsParametersInOrder(t *testing.T) {
	cases := []struct {
		name, pattern string
		params        []string
		want          string
	}{
		{"no parameter", AdminProductsPath, nil, "/products"},
		{"one", AdminPausePath, []string{"lamp"}, "/products/lamp/pause"},
		{"two", AdminChartPath, []string{"lamp", "rate"}, "/products/lamp/report/rate"},
		{"escaped", OrderPath, []string{"a/b?c"}, "/api/v1/orders/a%2Fb%3Fc"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Path(tc.pattern, tc.params...); got != tc.want {
				t.Fatalf("Path(%s, %q) = %s, want %s", tc.pattern, tc.params, got, tc.want)
			}
		})
	}
}

func TestPathPanicsOnTheWrongNumberOfParameters(t *testing.T) {
	for _, params := range [][]string{nil, {"a", "b"}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Fatalf("Path(%s, %q) did not panic", AdminPausePath, params)
				}
			}()
			Path(AdminPausePath, params...)
		}()
	}
}
