package main

import "github.com/gpufleet/gpufleet/internal/model"

// accelerator is one entry of the embedded spec table. Its JSON form is what
// catalog.Accelerator decodes; the catalog tests decode specs.json strictly,
// so a field renamed on one side only fails them.
type accelerator struct {
	Name               string      `json:"name"`
	Variant            string      `json:"variant"`
	Vendor             string      `json:"vendor"`
	Memory             model.Bytes `json:"memory,omitempty"`
	MemoryBandwidthGBs float64     `json:"memoryBandwidthGBs,omitempty"`
	BF16TFLOPS         float64     `json:"bf16TFLOPS,omitempty"`
	FP16TFLOPS         float64     `json:"fp16TFLOPS,omitempty"`
	FP32TFLOPS         float64     `json:"fp32TFLOPS,omitempty"`
	Interconnect       string      `json:"interconnect,omitempty"`
	InterconnectGBs    float64     `json:"interconnectGBs,omitempty"`
	TDPWatts           float64     `json:"tdpWatts,omitempty"`
	Source             string      `json:"source"`
	Verified           string      `json:"verified"`
	Notes              string      `json:"notes"`

	// From is the "gpu|variant" key of the gpu_specs.csv row this entry was
	// checked against; empty for entries that the source lacks.
	From string `json:"-"`
}

const gib = model.GiB

// Sources cited by several entries.
const (
	h100Datasheet  = "NVIDIA H100 Tensor Core GPU datasheet, https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet"
	a100Datasheet  = "NVIDIA A100 datasheet (1758950-r4), https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf"
	v100Datasheet  = "NVIDIA V100 datasheet (1165301-r5), https://images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf"
	p100Datasheet  = "NVIDIA Tesla P100 datasheet, https://images.nvidia.com/content/tesla/pdf/nvidia-tesla-p100-datasheet.pdf"
	t4Datasheet    = "NVIDIA T4 datasheet, https://www.nvidia.com/en-us/data-center/tesla-t4/"
	a6000Datasheet = "NVIDIA RTX A6000 datasheet, https://www.nvidia.com/en-us/design-visualization/rtx-a6000/"
	hgxPage        = "NVIDIA HGX platform specifications, https://www.nvidia.com/en-us/data-center/hgx/"
)

// Verified levels; the catalog package documents what each one promises.
const (
	datasheet  = "datasheet"
	thirdParty = "third-party"
	unverified = "unverified"
)

// accelerators is the checked spec table, one entry per accelerator variant.
// Name is the catalog's accelerator name (TPUs: the slice name without its
// size, e.g. tpu-v5litepod); where one catalog name covers several variants
// the first entry is the one most of its catalog rows carry.
//
// Figures are per GPU (per chip for TPUs and Trainium), dense (no 2:4
// sparsity), vendor "GB" memory stored as GiB as the catalog does; 0 means
// the vendor publishes no figure or the type is unsupported (no BF16 before
// Ampere). Interconnect bandwidth is bidirectional per device, as NVIDIA
// quotes NVLink.
var accelerators = []accelerator{
	// NVIDIA Blackwell.
	{Name: "B200", Variant: "HGX B200 (SXM)", Vendor: "NVIDIA", From: "B200|HGX B200 (SXM)",
		Memory: 180 * gib, MemoryBandwidthGBs: 7700, BF16TFLOPS: 2250, FP16TFLOPS: 2250, FP32TFLOPS: 75,
		Interconnect: "NVLink 5", InterconnectGBs: 1800, TDPWatts: 1000, Source: hgxPage, Verified: thirdParty,
		Notes: "Per GPU = HGX B200 8-GPU figures / 8: 36 PFLOPS FP16/BF16 with sparsity (2,250 dense), 600 TFLOPS FP32, 1.4 TB, 1.8 TB/s NVLink. NVIDIA quotes 62 TB/s (HGX) and 64 TB/s (DGX B200) memory bandwidth per 8 GPUs; the lower is kept. 1,000 W per GPU is from third-party pages, not the HGX page."},
	{Name: "B300", Variant: "HGX B300 (SXM, Blackwell Ultra)", Vendor: "NVIDIA",
		Memory: 288 * gib, MemoryBandwidthGBs: 8000, BF16TFLOPS: 2250, FP16TFLOPS: 2250, FP32TFLOPS: 75,
		Interconnect: "NVLink 5", InterconnectGBs: 1800, Source: hgxPage, Verified: thirdParty,
		Notes: "Per GPU = HGX B300 figures / 8: 36 PFLOPS FP16/BF16 with sparsity, 600 TFLOPS FP32, 2.3 TB, 1.8 TB/s NVLink. 8 TB/s per GPU is from third-party pages; TDP left blank (third-party pages disagree: 1,100-1,400 W). Catalog rows report 262-269 GiB usable."},
	{Name: "GB200", Variant: "GB200 NVL72 (per Blackwell GPU)", Vendor: "NVIDIA",
		Memory: 186 * gib, MemoryBandwidthGBs: 8000, BF16TFLOPS: 2500, FP16TFLOPS: 2500, FP32TFLOPS: 80,
		Interconnect: "NVLink 5", InterconnectGBs: 1800, TDPWatts: 1200,
		Source: "NVIDIA GB200 NVL72 specifications, https://www.nvidia.com/en-us/data-center/gb200-nvl72/", Verified: thirdParty,
		Notes: "Per GPU = NVL72 rack figures / 72: 360 PFLOPS FP16/BF16 with sparsity, 5,760 TFLOPS FP32, 13.4 TB HBM3e (OCI lists 192 GB per GPU), 576 TB/s. 1,200 W per GPU is from third-party pages."},
	{Name: "GB300", Variant: "GB300 NVL72 (per Blackwell Ultra GPU)", Vendor: "NVIDIA",
		Memory: 288 * gib, MemoryBandwidthGBs: 8000, Interconnect: "NVLink 5", InterconnectGBs: 1800,
		Source: "NVIDIA GB300 NVL72 specifications, https://www.nvidia.com/en-us/data-center/gb300-nvl72/", Verified: unverified,
		Notes: "Memory and bandwidth from third-party pages (20 TB and 576 TB/s per 72 GPUs, 288 GB HBM3e per GPU); compute and power not filled. Not checked against an NVIDIA document."},

	// NVIDIA Hopper.
	{Name: "H200", Variant: "SXM 141GB", Vendor: "NVIDIA", From: "H200|SXM 141GB",
		Memory: 141 * gib, MemoryBandwidthGBs: 4800, BF16TFLOPS: 989, FP16TFLOPS: 989, FP32TFLOPS: 67,
		Interconnect: "NVLink 4", InterconnectGBs: 900, TDPWatts: 700,
		Source: "NVIDIA H200 datasheet, https://www.nvidia.com/en-us/data-center/h200/", Verified: datasheet,
		Notes: "Datasheet: 4.8 TB/s, 1,979 TFLOPS BF16/FP16 with sparsity, 67 TFLOPS FP32, 900 GB/s NVLink, up to 700 W. The H200 NVL (PCIe) variant is up to 600 W."},
	{Name: "H100", Variant: "SXM5 80GB", Vendor: "NVIDIA", From: "H100|SXM5 80GB",
		Memory: 80 * gib, MemoryBandwidthGBs: 3350, BF16TFLOPS: 989, FP16TFLOPS: 989, FP32TFLOPS: 67,
		Interconnect: "NVLink 4", InterconnectGBs: 900, TDPWatts: 700, Source: h100Datasheet, Verified: datasheet,
		Notes: "Datasheet: 3.35 TB/s, 1,979 TFLOPS BF16/FP16 with sparsity, 67 TFLOPS FP32, 900 GB/s NVLink, up to 700 W; this confirms the NVLink and power figures the source had only from third parties. AWS p5, GCP a3, Azure ND H100 v5, OCI and Lambda sxm5 rows are this part."},
	{Name: "H100", Variant: "PCIe 80GB", Vendor: "NVIDIA", From: "H100|PCIe 80GB",
		Memory: 80 * gib, MemoryBandwidthGBs: 2000, BF16TFLOPS: 756, FP16TFLOPS: 756, FP32TFLOPS: 51,
		Interconnect: "NVLink bridge / PCIe Gen5", InterconnectGBs: 600, TDPWatts: 350,
		Source: "NVIDIA H100 PCIe product brief PB-11133-001_v02, https://www.nvidia.com/content/dam/en-zz/Solutions/gtcs22/data-center/h100/PB-11133-001_v02.pdf", Verified: datasheet,
		Notes: "Product brief: 300-350 W, 2 TB/s; 1,513 TFLOPS BF16/FP16 with sparsity per the H100 datasheet. Lambda gpu_1x_h100_pcie is this card."},
	{Name: "H100", Variant: "NVL 94GB", Vendor: "NVIDIA", From: "H100|NVL 94GB",
		Memory: 94 * gib, MemoryBandwidthGBs: 3900, BF16TFLOPS: 835, FP16TFLOPS: 835, FP32TFLOPS: 60,
		Interconnect: "NVLink bridge", InterconnectGBs: 600, TDPWatts: 400, Source: h100Datasheet, Verified: datasheet,
		Notes: "Datasheet: 3.9 TB/s, 1,671 TFLOPS BF16/FP16 with sparsity, 60 TFLOPS FP32, 350-400 W. Catalog H100 rows near 94 GB (Vast H100_NVL) are this card; Azure NC H100 v5 also uses it, though its rows say 80 GB."},
	{Name: "H100-MEGA", Variant: "SXM5 80GB (GCP a3-megagpu)", Vendor: "NVIDIA", From: "H100|SXM5 80GB",
		Memory: 80 * gib, MemoryBandwidthGBs: 3350, BF16TFLOPS: 989, FP16TFLOPS: 989, FP32TFLOPS: 67,
		Interconnect: "NVLink 4", InterconnectGBs: 900, TDPWatts: 700, Source: h100Datasheet, Verified: datasheet,
		Notes: "The H100 SXM5; GCP's a3-megagpu-8g differs only in host networking."},
	{Name: "GH200", Variant: "Grace Hopper Superchip, 96GB HBM3", Vendor: "NVIDIA",
		Memory: 96 * gib, MemoryBandwidthGBs: 4000, BF16TFLOPS: 989, FP16TFLOPS: 989, FP32TFLOPS: 67,
		Interconnect: "NVLink-C2C", InterconnectGBs: 900, TDPWatts: 1000,
		Source: "NVIDIA GH200 Grace Hopper Superchip datasheet, https://www.nvidia.com/en-us/data-center/grace-hopper-superchip/", Verified: datasheet,
		Notes: "Hopper GPU with 96 GB HBM3 at 4 TB/s (a 144 GB HBM3e, 4.9 TB/s variant exists); compute as H100 SXM. Interconnect is the 900 GB/s NVLink-C2C to the Grace CPU. TDP is the whole module (CPU, GPU, memory), configurable 450-1,000 W."},

	// NVIDIA Ampere data centre.
	{Name: "A100-80GB", Variant: "SXM4 80GB", Vendor: "NVIDIA", From: "A100|SXM4 80GB",
		Memory: 80 * gib, MemoryBandwidthGBs: 2039, BF16TFLOPS: 312, FP16TFLOPS: 312, FP32TFLOPS: 19.5,
		Interconnect: "NVLink 3", InterconnectGBs: 600, TDPWatts: 400, Source: a100Datasheet, Verified: datasheet,
		Notes: "Datasheet: 2,039 GB/s, 312 TFLOPS BF16/FP16 (624 with sparsity), 19.5 TFLOPS FP32, 600 GB/s NVLink, 400 W."},
	{Name: "A100-80GB", Variant: "PCIe 80GB", Vendor: "NVIDIA", From: "A100|PCIe 80GB",
		Memory: 80 * gib, MemoryBandwidthGBs: 1935, BF16TFLOPS: 312, FP16TFLOPS: 312, FP32TFLOPS: 19.5,
		Interconnect: "NVLink bridge (2 GPUs) / PCIe Gen4", InterconnectGBs: 600, TDPWatts: 300, Source: a100Datasheet, Verified: datasheet,
		Notes: "Datasheet: 1,935 GB/s, 300 W. Azure NC A100 v4 uses this card."},
	{Name: "A100", Variant: "SXM4 40GB", Vendor: "NVIDIA", From: "A100|SXM4 40GB",
		Memory: 40 * gib, MemoryBandwidthGBs: 1555, BF16TFLOPS: 312, FP16TFLOPS: 312, FP32TFLOPS: 19.5,
		Interconnect: "NVLink 3", InterconnectGBs: 600, TDPWatts: 400, Source: a100Datasheet, Verified: datasheet,
		Notes: "Datasheet: 40 GB HBM2 at 1,555 GB/s, 400 W. AWS p4d, GCP a2-highgpu, Azure ND A100 v4, OCI BM.GPU4.8 and Lambda gpu_8x_a100 are this part."},
	{Name: "A100", Variant: "PCIe 40GB", Vendor: "NVIDIA",
		Memory: 40 * gib, MemoryBandwidthGBs: 1555, BF16TFLOPS: 312, FP16TFLOPS: 312, FP32TFLOPS: 19.5,
		Interconnect: "NVLink bridge (2 GPUs) / PCIe Gen4", InterconnectGBs: 600, TDPWatts: 250, Source: a100Datasheet, Verified: datasheet,
		Notes: "Datasheet: 1,555 GB/s, 250 W; the source gave these only in a note. Lambda gpu_1x/2x/4x_a100 are this card."},
	{Name: "A10", Variant: "PCIe 24GB", Vendor: "NVIDIA", From: "A10|PCIe 24GB",
		Memory: 24 * gib, MemoryBandwidthGBs: 600, BF16TFLOPS: 125, FP16TFLOPS: 125, FP32TFLOPS: 31.2,
		Interconnect: "PCIe Gen4 x16", InterconnectGBs: 64, TDPWatts: 150,
		Source: "NVIDIA A10 datasheet, https://www.nvidia.com/en-us/data-center/products/a10-gpu/", Verified: datasheet,
		Notes: "Datasheet: 600 GB/s, 250 TFLOPS BF16/FP16 with sparsity, 31.2 TFLOPS FP32, 150 W. Azure NVads A10 v5 sizes sell 1/6 to 1/2 of one A10."},
	{Name: "A10G", Variant: "AWS G5 (GA102)", Vendor: "NVIDIA", From: "A10G|AWS G5 (GA102)",
		Memory: 24 * gib, MemoryBandwidthGBs: 600, Interconnect: "PCIe Gen4 x16", InterconnectGBs: 64,
		Source: "AWS EC2 G5 instances, https://aws.amazon.com/ec2/instance-types/g5/", Verified: thirdParty,
		Notes: "AWS publishes 24 GB per GPU and no datasheet; 600 GB/s is from third-party comparisons with the A10 (e.g. Baseten, 'NVIDIA A10 vs A10G'). Tensor, FP32 and power left blank: no vendor figure. Catalog rows report 22.35 GiB usable."},

	// NVIDIA Ada and Ampere workstation and consumer cards.
	{Name: "L40S", Variant: "PCIe 48GB", Vendor: "NVIDIA", From: "L40S|PCIe 48GB",
		Memory: 48 * gib, MemoryBandwidthGBs: 864, BF16TFLOPS: 362, FP16TFLOPS: 362, FP32TFLOPS: 91.6,
		Interconnect: "PCIe Gen4 x16", InterconnectGBs: 64, TDPWatts: 350,
		Source: "NVIDIA L40S datasheet, https://www.nvidia.com/en-us/data-center/l40s/", Verified: datasheet,
		Notes: "Datasheet: 864 GB/s, 362.05 TFLOPS BF16/FP16 (733 with sparsity), 91.6 TFLOPS FP32, 350 W, no NVLink."},
	{Name: "L4", Variant: "PCIe 24GB", Vendor: "NVIDIA", From: "L4|PCIe 24GB",
		Memory: 24 * gib, MemoryBandwidthGBs: 300, BF16TFLOPS: 121, FP16TFLOPS: 121, FP32TFLOPS: 30.3,
		Interconnect: "PCIe Gen4 x16", InterconnectGBs: 64, TDPWatts: 72,
		Source: "NVIDIA L4 datasheet, https://www.nvidia.com/en-us/data-center/l4/", Verified: datasheet,
		Notes: "Datasheet: 300 GB/s, 242 TFLOPS BF16/FP16 with sparsity, 30.3 TFLOPS FP32, 72 W."},
	{Name: "RTX6000-Ada", Variant: "RTX 6000 Ada Generation 48GB", Vendor: "NVIDIA",
		Memory: 48 * gib, MemoryBandwidthGBs: 960, BF16TFLOPS: 364.2, FP16TFLOPS: 364.2, FP32TFLOPS: 91.1,
		Interconnect: "PCIe Gen4 x16", InterconnectGBs: 64, TDPWatts: 300,
		Source: "NVIDIA RTX 6000 Ada datasheet, https://www.nvidia.com/en-us/design-visualization/rtx-6000/", Verified: thirdParty,
		Notes: "Datasheet: 48 GB GDDR6 ECC, 960 GB/s, 91.1 TFLOPS FP32, 1,457 TFLOPS FP8 with sparsity, 300 W, no NVLink. Dense BF16/FP16 is derived as the FP8 sparse figure / 4, not published."},
	{Name: "RTX5880-Ada", Variant: "RTX 5880 Ada Generation 48GB", Vendor: "NVIDIA",
		Memory: 48 * gib, MemoryBandwidthGBs: 960, FP32TFLOPS: 69.3, Interconnect: "PCIe Gen4 x16", InterconnectGBs: 64, TDPWatts: 285,
		Source: "NVIDIA RTX 5880 Ada product page (not checked)", Verified: unverified,
		Notes: "Figures recalled from NVIDIA's product page, not checked against it; tensor rates not filled."},
	{Name: "RTX4090", Variant: "GeForce RTX 4090 24GB", Vendor: "NVIDIA",
		Memory: 24 * gib, MemoryBandwidthGBs: 1008, BF16TFLOPS: 165.2, FP16TFLOPS: 165.2, FP32TFLOPS: 82.6,
		Interconnect: "PCIe Gen4 x16", InterconnectGBs: 64, TDPWatts: 450,
		Source: "NVIDIA Ada GPU architecture whitepaper, appendix A (GeForce RTX 4090)", Verified: datasheet,
		Notes: "Whitepaper: FP16/BF16 tensor with FP32 accumulate 165.2 dense (330.3 with FP16 accumulate), 82.6 TFLOPS FP32, 1,008 GB/s, 450 W TGP, no NVLink."},
	{Name: "RTX4070", Variant: "GeForce RTX 4070 Ti SUPER 16GB", Vendor: "NVIDIA",
		Memory: 16 * gib, MemoryBandwidthGBs: 672, FP32TFLOPS: 44.1, Interconnect: "PCIe Gen4 x16", InterconnectGBs: 64, TDPWatts: 285,
		Source: "NVIDIA GeForce RTX 4070 family specifications (not checked)", Verified: unverified,
		Notes: "Vast's RTX_4070S_Ti offers are the 4070 Ti SUPER. Figures recalled, not checked against a document."},
	{Name: "RTX4060", Variant: "GeForce RTX 4060 Ti 16GB", Vendor: "NVIDIA",
		Memory: 16 * gib, MemoryBandwidthGBs: 288, FP32TFLOPS: 22.1, Interconnect: "PCIe Gen4 x8", InterconnectGBs: 32, TDPWatts: 165,
		Source: "NVIDIA GeForce RTX 4060 family specifications (not checked)", Verified: unverified,
		Notes: "Vast's RTX_4060_Ti offers report 16 GB, so the 16 GB 4060 Ti. Figures recalled, not checked against a document."},
	{Name: "RTX6000", Variant: "Quadro RTX 6000 24GB (Turing)", Vendor: "NVIDIA",
		Memory: 24 * gib, MemoryBandwidthGBs: 672, FP16TFLOPS: 130.5, FP32TFLOPS: 16.3,
		Interconnect: "NVLink bridge (2 GPUs)", InterconnectGBs: 100, TDPWatts: 295,
		Source: "NVIDIA Quadro RTX 6000 datasheet", Verified: datasheet,
		Notes: "Lambda's gpu_1x_rtx6000 has 24 GB, so it is the Turing Quadro RTX 6000, not the 48 GB RTX 6000 Ada. Datasheet: 130.5 TFLOPS tensor (FP16), 16.3 TFLOPS FP32, 672 GB/s, 100 GB/s NVLink, 295 W; no BF16 (Turing)."},
	{Name: "A6000", Variant: "RTX A6000 48GB", Vendor: "NVIDIA", From: "RTX A6000|PCIe 48GB",
		Memory: 48 * gib, MemoryBandwidthGBs: 768, BF16TFLOPS: 154.8, FP16TFLOPS: 154.8, FP32TFLOPS: 38.7,
		Interconnect: "NVLink bridge (2 GPUs)", InterconnectGBs: 112.5, TDPWatts: 300, Source: a6000Datasheet, Verified: datasheet,
		Notes: "Datasheet: 768 GB/s, 309.7 TFLOPS tensor with sparsity, 38.7 TFLOPS FP32, 112.5 GB/s NVLink, 300 W."},
	{Name: "RTXA6000", Variant: "RTX A6000 48GB", Vendor: "NVIDIA", From: "RTX A6000|PCIe 48GB",
		Memory: 48 * gib, MemoryBandwidthGBs: 768, BF16TFLOPS: 154.8, FP16TFLOPS: 154.8, FP32TFLOPS: 38.7,
		Interconnect: "NVLink bridge (2 GPUs)", InterconnectGBs: 112.5, TDPWatts: 300, Source: a6000Datasheet, Verified: datasheet,
		Notes: "Vast's name for the A6000 (Lambda's name)."},
	{Name: "RTXA5000", Variant: "RTX A5000 24GB", Vendor: "NVIDIA",
		Memory: 24 * gib, MemoryBandwidthGBs: 768, BF16TFLOPS: 111.1, FP16TFLOPS: 111.1, FP32TFLOPS: 27.8,
		Interconnect: "NVLink bridge (2 GPUs)", InterconnectGBs: 112.5, TDPWatts: 230,
		Source: "NVIDIA RTX A5000 datasheet, https://www.nvidia.com/en-us/design-visualization/rtx-a5000/", Verified: datasheet,
		Notes: "Datasheet: 768 GB/s, 222.2 TFLOPS tensor with sparsity, 27.8 TFLOPS FP32, 112.5 GB/s NVLink, 230 W."},
	{Name: "RTX3090", Variant: "GeForce RTX 3090 24GB", Vendor: "NVIDIA",
		Memory: 24 * gib, MemoryBandwidthGBs: 936, BF16TFLOPS: 71, FP16TFLOPS: 71, FP32TFLOPS: 35.6,
		Interconnect: "NVLink bridge (2 GPUs)", InterconnectGBs: 112.5, TDPWatts: 350,
		Source: "NVIDIA Ampere GA102 GPU architecture whitepaper (GeForce RTX 3090)", Verified: datasheet,
		Notes: "Whitepaper: FP16/BF16 tensor with FP32 accumulate 71 dense (142 with FP16 accumulate), 35.6 TFLOPS FP32, 936 GB/s, 350 W."},
	{Name: "RTX3060", Variant: "GeForce RTX 3060 12GB / 3060 Ti 8GB", Vendor: "NVIDIA",
		Source: "none", Verified: unverified,
		Notes: "Vast files both the RTX 3060 (12 GB) and the 3060 Ti (8 GB) under this name, so no single figure applies; use the offer's memory."},

	// NVIDIA Blackwell workstation and consumer cards.
	{Name: "RTX5090", Variant: "GeForce RTX 5090 32GB", Vendor: "NVIDIA",
		Memory: 32 * gib, MemoryBandwidthGBs: 1792, BF16TFLOPS: 209.5, FP16TFLOPS: 209.5, FP32TFLOPS: 104.8,
		Interconnect: "PCIe Gen5 x16", InterconnectGBs: 128, TDPWatts: 575,
		Source: "NVIDIA RTX Blackwell GPU architecture whitepaper (GeForce RTX 5090)", Verified: thirdParty,
		Notes: "32 GB GDDR7, 1,792 GB/s, 575 W and about 105 TFLOPS FP32 agree across NVIDIA and third-party pages; the dense FP16/BF16 tensor rate with FP32 accumulate (209.5) is recalled from the whitepaper, not re-checked."},
	{Name: "RTX5070", Variant: "GeForce RTX 5070 12GB", Vendor: "NVIDIA",
		Memory: 12 * gib, MemoryBandwidthGBs: 672, FP32TFLOPS: 30.9, Interconnect: "PCIe Gen5 x16", InterconnectGBs: 128, TDPWatts: 250,
		Source: "NVIDIA GeForce RTX 5070 specifications (not checked)", Verified: unverified,
		Notes: "Figures recalled, not checked against a document."},
	{Name: "RTXPRO6000", Variant: "RTX PRO 6000 Blackwell Server Edition 96GB", Vendor: "NVIDIA",
		Memory: 96 * gib, MemoryBandwidthGBs: 1597, Interconnect: "PCIe Gen5 x16", InterconnectGBs: 128, TDPWatts: 600,
		Source: "NVIDIA RTX PRO 6000 Blackwell Server Edition product page (not checked)", Verified: unverified,
		Notes: "OCI BM.GPU.RTXPRO.8. 96 GB GDDR7; bandwidth and the configurable 600 W maximum recalled, not checked; compute not filled."},
	{Name: "RTXPRO6000WS", Variant: "RTX PRO 6000 Blackwell Workstation Edition 96GB", Vendor: "NVIDIA",
		Memory: 96 * gib, MemoryBandwidthGBs: 1792, FP32TFLOPS: 125, Interconnect: "PCIe Gen5 x16", InterconnectGBs: 128, TDPWatts: 600,
		Source: "NVIDIA GTC 2025 RTX PRO 6000 announcement, as reported by third parties", Verified: thirdParty,
		Notes: "96 GB GDDR7 on a 512-bit bus at 28 Gbps (1,792 GB/s), up to 125 TFLOPS FP32, 600 W, per third-party reports of NVIDIA's announcement."},

	// NVIDIA Volta, Pascal, Turing and Maxwell.
	{Name: "V100", Variant: "SXM2 16GB", Vendor: "NVIDIA", From: "V100|SXM2 16/32GB",
		Memory: 16 * gib, MemoryBandwidthGBs: 900, FP16TFLOPS: 125, FP32TFLOPS: 15.7,
		Interconnect: "NVLink 2", InterconnectGBs: 300, TDPWatts: 300, Source: v100Datasheet, Verified: datasheet,
		Notes: "Datasheet: 900 GB/s, 125 TFLOPS FP16 tensor, 15.7 TFLOPS FP32, 300 GB/s NVLink, 300 W; no BF16 (Volta). AWS p3, GCP, Lambda and OCI BM.GPU3.8 are SXM2."},
	{Name: "V100", Variant: "PCIe 16GB", Vendor: "NVIDIA", From: "V100|SXM2 16/32GB",
		Memory: 16 * gib, MemoryBandwidthGBs: 900, FP16TFLOPS: 112, FP32TFLOPS: 14,
		Interconnect: "PCIe Gen3 x16", InterconnectGBs: 32, TDPWatts: 250, Source: v100Datasheet, Verified: datasheet,
		Notes: "Datasheet PCIe column: 112 TFLOPS FP16 tensor, 14 TFLOPS FP32, 250 W. Azure NCv3 uses this card."},
	{Name: "V100-32GB", Variant: "SXM2 32GB", Vendor: "NVIDIA", From: "V100|SXM2 16/32GB",
		Memory: 32 * gib, MemoryBandwidthGBs: 900, FP16TFLOPS: 125, FP32TFLOPS: 15.7,
		Interconnect: "NVLink 2", InterconnectGBs: 300, TDPWatts: 300, Source: v100Datasheet, Verified: datasheet,
		Notes: "The 32 GB SXM2 part (AWS p3dn, Azure ND40rs_v2); the source row covers both sizes with 16 GB."},
	{Name: "P100", Variant: "PCIe 16GB", Vendor: "NVIDIA", From: "P100|SXM2/PCIe 16GB",
		Memory: 16 * gib, MemoryBandwidthGBs: 732, FP16TFLOPS: 18.7, FP32TFLOPS: 9.3,
		Interconnect: "PCIe Gen3 x16", InterconnectGBs: 32, TDPWatts: 250, Source: p100Datasheet, Verified: datasheet,
		Notes: "GCP and OCI attach the PCIe card, so it comes first; the source row gave SXM2 figures. Datasheet PCIe 16 GB: 732 GB/s, 18.7 TFLOPS FP16, 9.3 FP32, 250 W."},
	{Name: "P100", Variant: "SXM2 16GB", Vendor: "NVIDIA", From: "P100|SXM2/PCIe 16GB",
		Memory: 16 * gib, MemoryBandwidthGBs: 732, FP16TFLOPS: 21.2, FP32TFLOPS: 10.6,
		Interconnect: "NVLink 1", InterconnectGBs: 160, TDPWatts: 300, Source: p100Datasheet, Verified: datasheet,
		Notes: "Datasheet SXM2: 21.2 TFLOPS FP16, 10.6 FP32, 160 GB/s NVLink, 300 W."},
	{Name: "T4", Variant: "PCIe 16GB", Vendor: "NVIDIA", From: "T4|PCIe 16GB",
		Memory: 16 * gib, MemoryBandwidthGBs: 320, FP16TFLOPS: 65, FP32TFLOPS: 8.1,
		Interconnect: "PCIe Gen3 x16", InterconnectGBs: 32, TDPWatts: 70, Source: t4Datasheet, Verified: datasheet,
		Notes: "Datasheet: 320 GB/s, 65 TFLOPS FP16 mixed precision, 8.1 TFLOPS FP32, 70 W; no BF16 (Turing)."},
	{Name: "T4g", Variant: "PCIe 16GB (AWS G5g)", Vendor: "NVIDIA", From: "T4|PCIe 16GB",
		Memory: 16 * gib, MemoryBandwidthGBs: 320, FP16TFLOPS: 65, FP32TFLOPS: 8.1,
		Interconnect: "PCIe Gen3 x16", InterconnectGBs: 32, TDPWatts: 70, Source: t4Datasheet, Verified: datasheet,
		Notes: "The T4 on AWS G5g, paired with Graviton2 hosts."},
	{Name: "P4", Variant: "Tesla P4 8GB", Vendor: "NVIDIA",
		Memory: 8 * gib, MemoryBandwidthGBs: 192, FP32TFLOPS: 5.5, Interconnect: "PCIe Gen3 x16", InterconnectGBs: 32, TDPWatts: 75,
		Source: "NVIDIA Tesla P4 datasheet", Verified: datasheet,
		Notes: "Datasheet: 8 GB GDDR5, 192 GB/s, 5.5 TFLOPS FP32, 22 TOPS INT8, 50/75 W; no fast FP16 or BF16."},
	{Name: "M60", Variant: "Tesla M60, one of two GPUs per board", Vendor: "NVIDIA",
		Memory: 8 * gib, MemoryBandwidthGBs: 160, FP32TFLOPS: 4.8, Interconnect: "PCIe Gen3 x16", InterconnectGBs: 32, TDPWatts: 150,
		Source: "NVIDIA Tesla M60 datasheet", Verified: thirdParty,
		Notes: "Azure NVv3 counts each of the board's two GPUs. Board: 16 GB GDDR5, 4,096 CUDA cores, 300 W; per GPU = half. FP32 (2,048 cores x 1.18 GHz x 2) and 160 GB/s per GPU are third-party figures."},

	// AMD.
	{Name: "MI300X", Variant: "OAM 192GB", Vendor: "AMD", From: "MI300X|OAM 192GB",
		Memory: 192 * gib, MemoryBandwidthGBs: 5300, BF16TFLOPS: 1307.4, FP16TFLOPS: 1307.4, FP32TFLOPS: 163.4,
		Interconnect: "Infinity Fabric (7 links)", InterconnectGBs: 896, TDPWatts: 750,
		Source: "AMD Instinct MI300X specifications, https://www.amd.com/en/products/accelerators/instinct/mi300/mi300x.html", Verified: datasheet,
		Notes: "AMD: 5.3 TB/s, 1,307.4 TFLOPS BF16/FP16 (2,614.9 with sparsity), 163.4 TFLOPS FP32 vector and matrix, 7 x 128 GB/s Infinity Fabric, 750 W. Corrects the source's note: 81.7 TFLOPS is FP64 vector, not FP32."},
	{Name: "MI355X", Variant: "OAM 288GB", Vendor: "AMD",
		Memory: 288 * gib, MemoryBandwidthGBs: 8000, BF16TFLOPS: 2516.6, FP16TFLOPS: 2516.6, FP32TFLOPS: 157.3,
		Interconnect: "Infinity Fabric", TDPWatts: 1400,
		Source: "AMD Instinct MI355X specifications, https://www.amd.com/en/products/accelerators/instinct/mi350/mi355x.html", Verified: thirdParty,
		Notes: "288 GB HBM3E, 8 TB/s and 1,400 W agree across AMD launch material and third-party reports; dense BF16/FP16 and FP32 vector are recalled from AMD's page, not re-checked."},
	{Name: "MI25", Variant: "Radeon Instinct MI25 16GB", Vendor: "AMD",
		Memory: 16 * gib, MemoryBandwidthGBs: 484, FP16TFLOPS: 24.6, FP32TFLOPS: 12.3, Interconnect: "PCIe Gen3 x16", InterconnectGBs: 32, TDPWatts: 300,
		Source: "AMD Radeon Instinct MI25 datasheet", Verified: datasheet,
		Notes: "Datasheet: 16 GB HBM2, 484 GB/s, 24.6 TFLOPS FP16, 12.3 FP32, 300 W. Azure NVv4 sizes are 1/8 to 1 of one MI25, though the catalog lists each as one 16 GB GPU."},

	// Google TPUs, per chip. The catalog's slice names count chips for v5e
	// and v6e and TensorCores (two per chip) for v2, v3, v4 and v5p.
	{Name: "tpu-v2", Variant: "TPU v2 chip", Vendor: "Google",
		Memory: 16 * gib, BF16TFLOPS: 45, Interconnect: "ICI",
		Source: "Google Cloud TPU v2, https://cloud.google.com/tpu/docs/v2", Verified: datasheet,
		Notes: "Per chip = a v2-8 board (4 chips, 64 GiB HBM, 180 TFLOPS bf16) / 4; HBM bandwidth not filled (Google's figures differ by document). tpu-v2-N = N TensorCores."},
	{Name: "tpu-v3", Variant: "TPU v3 chip", Vendor: "Google",
		Memory: 32 * gib, MemoryBandwidthGBs: 900, BF16TFLOPS: 123, Interconnect: "ICI", TDPWatts: 262,
		Source: "Google Cloud TPU v3, https://cloud.google.com/tpu/docs/v3", Verified: datasheet,
		Notes: "Google: 123 TFLOPS bf16, 32 GiB HBM2 at 900 GBps, measured max power 262 W (mean 220 W). tpu-v3-N = N TensorCores."},
	{Name: "tpu-v4", Variant: "TPU v4 chip", Vendor: "Google", From: "TPU v4|chip",
		Memory: 32 * gib, MemoryBandwidthGBs: 1200, BF16TFLOPS: 275, Interconnect: "ICI", TDPWatts: 192,
		Source: "Google Cloud TPU v4, https://cloud.google.com/tpu/docs/v4", Verified: datasheet,
		Notes: "Google: 275 TFLOPS bf16, 32 GiB HBM2 at 1,200 GBps, measured max power 192 W (mean 170 W). tpu-v4-N = N TensorCores."},
	{Name: "tpu-v5litepod", Variant: "TPU v5e chip", Vendor: "Google", From: "TPU v5e|chip",
		Memory: 16 * gib, MemoryBandwidthGBs: 819, BF16TFLOPS: 197, Interconnect: "ICI", InterconnectGBs: 400,
		Source: "Google Cloud TPU v5e, https://cloud.google.com/tpu/docs/v5e", Verified: datasheet,
		Notes: "Google: 197 TFLOPS bf16, 16 GB HBM2 at 819 GBps, 400 GBps bidirectional ICI per chip (1,600 Gbps is one direction; bidirectional matches how NVLink is quoted). tpu-v5litepod-N = N chips."},
	{Name: "tpu-v5p", Variant: "TPU v5p chip", Vendor: "Google", From: "TPU v5p|chip",
		Memory: 95 * gib, MemoryBandwidthGBs: 2765, BF16TFLOPS: 459, Interconnect: "ICI", InterconnectGBs: 1200,
		Source: "Google Cloud TPU v5p, https://cloud.google.com/tpu/docs/v5p", Verified: datasheet,
		Notes: "Google: 459 TFLOPS bf16, 95 GiB HBM2e at 2,765 GBps, 1,200 GBps bidirectional ICI per chip (4,800 Gbps one way). tpu-v5p-N = N TensorCores."},
	{Name: "tpu-v6e", Variant: "TPU v6e (Trillium) chip", Vendor: "Google",
		Memory: 32 * gib, MemoryBandwidthGBs: 1638, BF16TFLOPS: 918, Interconnect: "ICI", InterconnectGBs: 800,
		Source: "Google Cloud TPU v6e, https://cloud.google.com/tpu/docs/v6e", Verified: datasheet,
		Notes: "Google: 918 TFLOPS bf16, 32 GB HBM at 1,638 GBps, 800 GBps bidirectional ICI per chip. tpu-v6e-N = N chips."},

	// Not in the catalog; kept because gpu_specs.csv has them.
	{Name: "Gaudi3", Variant: "OAM 128GB", Vendor: "Intel", From: "Gaudi 3|OAM 128GB",
		Memory: 128 * gib, MemoryBandwidthGBs: 3700, BF16TFLOPS: 1835, FP16TFLOPS: 1835,
		Interconnect: "24x 200GbE RoCE on-chip", InterconnectGBs: 1200, TDPWatts: 900,
		Source: "Intel Gaudi 3 AI accelerator white paper, https://www.intel.com/content/www/us/en/products/details/processors/ai-accelerators/gaudi.html", Verified: datasheet,
		Notes: "Intel: 128 GB HBM2e at 3.7 TB/s, 1,835 TFLOPS BF16 matrix (MME), 24 x 200 GbE (1.2 TB/s bidirectional), 900 W OAM. Not offered by any catalog cloud."},
	{Name: "Trainium2", Variant: "chip", Vendor: "AWS", From: "Trainium2|chip",
		Memory: 96 * gib, MemoryBandwidthGBs: 2900, BF16TFLOPS: 667, FP16TFLOPS: 667, FP32TFLOPS: 181, Interconnect: "NeuronLink-v3",
		Source: "AWS Neuron Trainium2 architecture, https://awsdocs-neuron.readthedocs-hosted.com/en/latest/about-neuron/arch/neuron-hardware/trainium2.html", Verified: datasheet,
		Notes: "Neuron docs: 667 TFLOPS BF16/FP16 dense (published, no longer an FP8/2 estimate), 1,299 FP8, 181 FP32, 96 GiB at 2.9 TB/s. The catalog's AWS data has no trn2 rows."},
}
