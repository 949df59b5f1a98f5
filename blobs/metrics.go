package blobs

import (
	"github.com/prometheus/client_golang/prometheus"
)

// collector exports a Store's counters:
//
//	syncnode_blob_uploads_total{outcome}   stored, existing, refused
//	syncnode_blob_upload_bytes_total       bytes stored
//	syncnode_blob_downloads_total          downloads opened
//	syncnode_blob_download_bytes_total     bytes streamed to clients
//	syncnode_blob_swept_total              orphans deleted by the sweep
//	syncnode_blob_swept_objects_total      objects no blob row named, deleted by the sweep
//	syncnode_blob_swept_chunks_total       chunk subjects of no object (a killed upload), purged by the sweep
//	syncnode_blob_sweep_errors_total       failed background sweep passes
type collector struct {
	m                                                                *Metrics
	uploads, upBytes, downloads, downBytes, swept, sweptO, sweptC, e *prometheus.Desc
}

// Collector returns the store's Prometheus collector.
func (s *Store) Collector() prometheus.Collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	return &collector{
		m:         &s.m,
		uploads:   d("syncnode_blob_uploads_total", "Blob uploads by outcome (stored, existing, refused).", "outcome"),
		upBytes:   d("syncnode_blob_upload_bytes_total", "Blob bytes stored."),
		downloads: d("syncnode_blob_downloads_total", "Blob downloads opened."),
		downBytes: d("syncnode_blob_download_bytes_total", "Blob bytes streamed to clients."),
		swept:     d("syncnode_blob_swept_total", "Orphan blobs deleted by the sweep."),
		sweptO:    d("syncnode_blob_swept_objects_total", "Blob objects no blob row named (a crash between object and row), deleted by the sweep."),
		sweptC:    d("syncnode_blob_swept_chunks_total", "Blob chunk subjects no object named (an upload killed before its meta), purged by the sweep."),
		e:         d("syncnode_blob_sweep_errors_total", "Background blob sweep passes that failed."),
	}
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.uploads, c.upBytes, c.downloads, c.downBytes, c.swept, c.sweptO, c.sweptC, c.e} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	counter(c.uploads, c.m.Uploads.Load(), "stored")
	counter(c.uploads, c.m.UploadsExisting.Load(), "existing")
	counter(c.uploads, c.m.UploadsRefused.Load(), "refused")
	counter(c.upBytes, c.m.UploadBytes.Load())
	counter(c.downloads, c.m.Downloads.Load())
	counter(c.downBytes, c.m.DownloadBytes.Load())
	counter(c.swept, c.m.Swept.Load())
	counter(c.sweptO, c.m.SweptObjects.Load())
	counter(c.sweptC, c.m.SweptChunks.Load())
	counter(c.e, c.m.SweepErrors.Load())
}
