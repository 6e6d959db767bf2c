package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/gpufleet/gpufleet/internal/advisor"
)

// LoadCalibration reads the data dir's calibration file, if any. A missing
// file is no calibration; an unreadable or corrupt one is an error.
func LoadCalibration(dataDir string) (advisor.Calibration, string, error) {
	var cal advisor.Calibration
	path := filepath.Join(dataDir, CalibrationFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return cal, "", nil
	}
	if err != nil {
		return cal, "", fmt.Errorf("reading calibration: %w", err)
	}
	if err := json.Unmarshal(data, &cal); err != nil {
		return cal, "", fmt.Errorf("reading calibration %s: %w (re-run gpufleet bench, or delete the file)", path, err)
	}
	return cal, "calibration read from " + path, nil
}
