package kvevents

import "testing"

func TestParseMedium(t *testing.T) {
	for in, want := range map[string]Medium{
		"": MediumGPU, "GPU": MediumGPU, "gpu": MediumGPU, "CPU": MediumCPU, "CPU_PINNED": MediumCPU,
		"STORAGE": MediumDisk, "DISK": MediumDisk, "EXTERNAL": MediumExternal,
		"NVME": MediumUnknown, "CPU_TIER2": MediumUnknown,
	} {
		if got := ParseMedium(in); got != want {
			t.Errorf("ParseMedium(%q) = %v, want %v", in, got, want)
		}
	}
}
