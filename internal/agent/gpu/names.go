package gpu

import (
	"strings"

	"github.com/gpufleet/gpufleet/internal/model"
)

// a100Large is the memory above which an A100 is the 80 GB one: the 40 GB
// card reports about 40 GiB, the 80 GB card about 80 GiB.
const a100Large = 60 * model.GiB

// CatalogName maps a product name as NVML and nvidia-smi report it to the
// catalog's model name. The name is split into words at spaces, '-' and '_',
// and the first word that names a family decides:
//
//	word   catalog     examples
//	H100   H100        NVIDIA H100 80GB HBM3, NVIDIA H100 PCIe, NVIDIA H100 NVL
//	H200   H200        NVIDIA H200, NVIDIA H200 NVL
//	GH200  GH200       NVIDIA GH200 480GB
//	B200   B200        NVIDIA B200
//	A100   A100        NVIDIA A100-SXM4-40GB, NVIDIA A100-PCIE-40GB
//	       A100-80GB   NVIDIA A100-SXM4-80GB, NVIDIA A100 80GB PCIe (an "80GB" word, or memory over 60 GiB)
//	A10G   A10G        NVIDIA A10G
//	A10    A10         NVIDIA A10
//	A40    A40         NVIDIA A40
//	L40S   L40S        NVIDIA L40S
//	L40    L40         NVIDIA L40
//	L4     L4          NVIDIA L4
//	T4     T4          Tesla T4
//	V100   V100        Tesla V100-SXM2-16GB
//
// Any other name is kept as reported (trimmed), so a new model still shows
// up, under its own name, until the catalog and this table learn it.
func CatalogName(product string, memory model.Bytes) string {
	words := strings.FieldsFunc(strings.ToUpper(product), func(r rune) bool {
		return r == ' ' || r == '-' || r == '_'
	})
	for _, w := range words {
		switch w {
		case "H100", "H200", "GH200", "B200", "A10G", "A10", "A40", "L40S", "L40", "L4", "T4", "V100":
			return w
		case "A100":
			for _, w := range words {
				if w == "80GB" {
					return "A100-80GB"
				}
			}
			if memory > a100Large {
				return "A100-80GB"
			}
			return "A100"
		}
	}
	return strings.TrimSpace(product)
}
