package draclass

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DriverName is gpulab's DRA driver, the attribute domain of its devices
// and the name of its DeviceClass: apart from NVIDIA's gpu.nvidia.com, so
// both can run in one cluster. It lives here, below the agent that
// publishes it, the testbeds that install its class and the suite that
// claims it, so none of them imports another for a name.
const DriverName = "gpu.gpulab.io"

// GPUClass selects every full GPU of driver, as NVIDIA's gpu.nvidia.com
// class selects its own: claims ask for it by the driver's name.
func GPUClass(driver string) *resourceapi.DeviceClass {
	return &resourceapi.DeviceClass{
		TypeMeta:   metav1.TypeMeta{APIVersion: resourceapi.SchemeGroupVersion.String(), Kind: "DeviceClass"},
		ObjectMeta: metav1.ObjectMeta{Name: driver},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: fmt.Sprintf("device.driver == '%s' && device.attributes['%s'].type == 'gpu'", driver, driver),
		}}}},
	}
}
