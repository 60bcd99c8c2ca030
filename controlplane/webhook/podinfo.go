package webhook

import corev1 "k8s.io/api/core/v1"

// The pod's annotations, projected for the agent by the downward API: the
// kubelet rewrites the file when they change, so an annotation such as
// meshdns.io/query-log switches the running agent without a restart.
const (
	PodInfoVolumeName = "meshdns-podinfo"
	podInfoDir        = "/etc/meshdns/podinfo"
	annotationsFile   = "annotations"
)

func (t *Template) podInfoVolume() corev1.Volume {
	return corev1.Volume{
		Name: PodInfoVolumeName,
		VolumeSource: corev1.VolumeSource{DownwardAPI: &corev1.DownwardAPIVolumeSource{Items: []corev1.DownwardAPIVolumeFile{{
			Path:     annotationsFile,
			FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.annotations"},
		}}}},
	}
}
