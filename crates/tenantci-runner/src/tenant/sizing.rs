//! Does a job pod fit a rented node? A Kubernetes-executor job pod is the build container plus
//! the helper plus each service container; its requests must fit the node image's allocatable,
//! or the pod stays Pending forever (no node the autoscaler can rent is big enough).
//! Pure: the caller loads the node image and turns the verdict into output.

use serde::Serialize;

use tenantci_core::node_image::NodeImage;
use tenantci_core::quantity::{self, Milli};
use tenantci_core::{Error, Result};

/// Requests of one job pod, as the runner config sets them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobPodRequests {
    /// CPU request of the build container, in millicores.
    pub build_cpu: Milli,
    /// Memory request of the build container, in millibytes.
    pub build_memory: Milli,
    /// CPU request of gitlab-runner's helper container, in millicores.
    pub helper_cpu: Milli,
    /// Memory request of the helper container, in millibytes.
    pub helper_memory: Milli,
    /// CPU request of each service container, in millicores.
    pub service_cpu: Milli,
    /// Memory request of each service container, in millibytes.
    pub service_memory: Milli,
    /// How many service containers a job runs (each gets the service requests).
    pub services: u32,
    /// Ephemeral-storage request of the build container (its output on the node's root filesystem),
    /// in millibytes; only the root-filesystem warning reads it.
    pub build_ephemeral_storage: Milli,
}

impl JobPodRequests {
    /// The pod's total CPU request: build, helper and every service container.
    pub fn cpu(&self) -> Milli {
        self.build_cpu + self.helper_cpu + Milli(self.service_cpu.0 * i128::from(self.services))
    }
    /// The pod's total memory request: build, helper and every service container.
    pub fn memory(&self) -> Milli {
        self.build_memory
            + self.helper_memory
            + Milli(self.service_memory.0 * i128::from(self.services))
    }
}

/// Parses a request flag; `what` names the flag in the error.
pub fn parse_request(what: &str, value: &str) -> Result<Milli> {
    match quantity::parse_resource(value) {
        Some(m) => Ok(m),
        None => Err(
            Error::bad_input(format!("{what} `{value}` is not a Kubernetes quantity"))
                .hint("write CPU as `500m` or `2` and memory as `512Mi` or `2Gi`"),
        ),
    }
}

/// The sizing verdict, `tenant size -o json`'s shape.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SizingReport {
    /// The job pod's total CPU request, e.g. `1100m`.
    pub cpu_request: String,
    /// The job pod's total memory request, e.g. `1152Mi`.
    pub memory_request: String,
    /// vCPUs of a rented node (the node image's `vcpu`).
    pub node_vcpu: u32,
    /// Memory of a rented node in MiB (the node image's `memMiB`).
    pub node_mem_mib: u64,
    /// The CPU a rented node's pods may request (capacity less the reserve), e.g. `1900m`.
    pub allocatable_cpu: String,
    /// The memory a rented node's pods may request (capacity less the reserve), e.g. `1792Mi`.
    pub allocatable_memory: String,
    /// What fits but may still fail (a job image too large for the root filesystem); empty when
    /// nothing.
    pub warnings: Vec<String>,
}

/// A pod's total requests, named with their breakdown for the error.
#[derive(Debug, Clone)]
pub struct PodTotal<'a> {
    /// "the job pod", "the executor Pod".
    pub what: &'a str,
    /// The pod's total CPU request, in millicores.
    pub cpu: Milli,
    /// How `cpu` adds up, for the error (e.g. `build 1, helper 100m, 0 service(s) x 0`).
    pub cpu_parts: String,
    /// The pod's total memory request, in millibytes.
    pub memory: Milli,
    /// How `memory` adds up, for the error.
    pub memory_parts: String,
    /// What the hint says to lower ("the job's requests").
    pub lower: &'a str,
}

/// Exit 2 naming the request and the image when a pod's requests exceed what a rented node
/// can allocate (it would stay Pending: no node the autoscaler can rent is big enough).
pub fn fits(pod: &PodTotal, image: &NodeImage) -> Result<()> {
    let (alloc_cpu, alloc_mem) = (image.allocatable_cpu(), image.allocatable_memory());
    let rebuild = format!(
        "changing either builds a new guest image (runbook §3); or lower {}",
        pod.lower
    );
    if pod.cpu > alloc_cpu {
        return Err(Error::bad_input(format!(
            "{} requests {} CPU ({}) but a rented node has {} allocatable: the node image has vcpu {} (memMiB {})",
            pod.what,
            quantity::format_cpu(pod.cpu),
            pod.cpu_parts,
            quantity::format_cpu(alloc_cpu),
            image.vcpu,
            image.mem_mib
        ))
        .hint(rebuild));
    }
    if pod.memory > alloc_mem {
        return Err(Error::bad_input(format!(
            "{} requests {} memory ({}) but a rented node has {} allocatable: the node image has memMiB {} (vcpu {})",
            pod.what,
            quantity::format_memory(pod.memory),
            pod.memory_parts,
            quantity::format_memory(alloc_mem),
            image.mem_mib,
            image.vcpu
        ))
        .hint(rebuild));
    }
    Ok(())
}

/// Checks that the job pod fits; exit 2 naming the request and the image otherwise.
/// `job_image_size_mib` enables the root-filesystem warning.
pub fn check(
    job: &JobPodRequests,
    image: &NodeImage,
    job_image_size_mib: Option<u64>,
) -> Result<SizingReport> {
    fits(
        &PodTotal {
            what: "the job pod",
            cpu: job.cpu(),
            cpu_parts: format!(
                "build {}, helper {}, {} service(s) x {}",
                quantity::format_cpu(job.build_cpu),
                quantity::format_cpu(job.helper_cpu),
                job.services,
                quantity::format_cpu(job.service_cpu)
            ),
            memory: job.memory(),
            memory_parts: format!(
                "build {}, helper {}, {} service(s) x {}",
                quantity::format_memory(job.build_memory),
                quantity::format_memory(job.helper_memory),
                job.services,
                quantity::format_memory(job.service_memory)
            ),
            lower: "the job's requests",
        },
        image,
    )?;
    let (cpu, mem) = (job.cpu(), job.memory());
    let (alloc_cpu, alloc_mem) = (image.allocatable_cpu(), image.allocatable_memory());
    let mut warnings = Vec::new();
    if let (Some(size), Some(rootfs)) = (job_image_size_mib, image.rootfs_mib) {
        // A pull holds the compressed layers and the unpacked snapshot at once (about twice
        // the image), and the build writes its output beside them.
        let output_mib = (job.build_ephemeral_storage.ceil_units() >> 20) as u64;
        let needed = size * 2 + output_mib;
        if needed > rootfs {
            warnings.push(format!(
                "a {size} MiB job image needs about {needed} MiB on the node's root filesystem (pull + unpack + {output_mib} MiB build output) but rootfsMiB is {rootfs}: the pod would never start (\"no space left on device\"); build a guest image with a larger root filesystem"
            ));
        }
    }
    Ok(SizingReport {
        cpu_request: quantity::format_cpu(cpu),
        memory_request: quantity::format_memory(mem),
        node_vcpu: image.vcpu,
        node_mem_mib: image.mem_mib,
        allocatable_cpu: quantity::format_cpu(alloc_cpu),
        allocatable_memory: quantity::format_memory(alloc_mem),
        warnings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(cpu: &str, mem: &str) -> JobPodRequests {
        JobPodRequests {
            build_cpu: quantity::parse(cpu).unwrap(),
            build_memory: quantity::parse(mem).unwrap(),
            helper_cpu: Milli(100),
            helper_memory: quantity::parse("128Mi").unwrap(),
            ..Default::default()
        }
    }

    #[test]
    fn a_job_that_fits_passes() {
        let r = check(&job("1", "1Gi"), &NodeImage::default(), None).unwrap();
        assert_eq!(r.cpu_request, "1100m");
        assert!(r.warnings.is_empty());
    }

    #[test]
    fn too_much_cpu_names_vcpu() {
        let e = check(&job("2", "512Mi"), &NodeImage::default(), None).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(e.message().contains("vcpu 2"), "{}", e.message());
        assert!(e.hint_text().unwrap().contains("new guest image"));
    }

    #[test]
    fn too_much_memory_names_mem_mib() {
        let e = check(&job("500m", "2Gi"), &NodeImage::default(), None).unwrap_err();
        assert!(e.message().contains("memMiB 2048"), "{}", e.message());
    }

    #[test]
    fn services_count_per_container() {
        let mut j = job("500m", "512Mi");
        j.service_cpu = Milli(500);
        j.services = 3;
        assert_eq!(j.cpu(), Milli(2100));
        assert!(check(&j, &NodeImage::default(), None).is_err());
    }

    #[test]
    fn warns_when_the_image_overflows_the_root_filesystem() {
        let image = NodeImage {
            rootfs_mib: Some(4096),
            ..NodeImage::default()
        };
        let r = check(&job("1", "1Gi"), &image, Some(3000)).unwrap();
        assert_eq!(r.warnings.len(), 1);
        assert!(r.warnings[0].contains("no space left on device"));
        let r = check(&job("1", "1Gi"), &image, Some(1000)).unwrap();
        assert!(r.warnings.is_empty());
    }
}
