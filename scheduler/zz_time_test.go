package scheduler
import ("testing";"time";"sort";"fmt")
func TestZZTime(t *testing.T) {
	specs := []string{"* * * * * *", "*/5 * * * * *", "* * * * *", "0 * * * *", "0 0 * * * *", "* * 9-17 * * *", "0 0 29 2 *", "0 0 0 29 2 *", "@daily", "@monthly", "@yearly", "5-3/2 1,2 ? jan-mar mon-fri", "0 0 1 1 *", "0 0,30 * * * *", "* 0 0 * * *", "0 0 * * 0", "0 0 13 * 5", "59 59 23 31 12 *"}
	zones := []string{"", "Europe/London", "Australia/Lord_Howe", "America/Havana", "Pacific/Chatham", "Asia/Tokyo", "Africa/Casablanca"}
	type r struct{ d time.Duration; s string }
	var rs []r
	for _, sp := range specs { for _, z := range zones {
		st := time.Now(); s, err := parseSchedule(sp, z); d := time.Since(st)
		info := ""
		if err == nil { info = fmt.Sprint(s.res, s.maxGap) } else { info = err.Error() }
		rs = append(rs, r{d, fmt.Sprintf("%q %q %s", sp, z, info)})
	}}
	sort.Slice(rs, func(i, j int) bool { return rs[i].d > rs[j].d })
	for _, x := range rs[:25] { t.Log(x.d, x.s) }
}
